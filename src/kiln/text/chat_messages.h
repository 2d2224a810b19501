// Chat messages and tools from JSON, as Hugging Face's apply_chat_template takes them:
//
//   messages: [{"role": "system"|"user"|"assistant"|"tool", "content": ...}, ...]
//     content     a string, or a list of text parts [{"type": "text", "text": "..."}, ...]
//                 (joined); null or absent only for an assistant message with tool calls
//     tool_calls  assistant only: [{"type": "function", "id": ..., "function": {"name": "...",
//                 "arguments": {...}}}, ...] or [{"name": ..., "arguments": ...}]; arguments as
//                 an object or as a JSON string of one (OpenAI's form), rendered as the object
//                 (Qwen3's template renders such a string as it is, and so does kiln for it)
//     reasoning_content    assistant only: its reasoning, for templates with thinking (Qwen3);
//                 the others refuse it
//     name, tool_call_id   accepted on tool messages; no template renders them
//   tools: [{"type": "function", "function": {...}}, ...], each rendered as its JSON
//
// Every other field is an error naming it, never a silent drop. Errors name `what` and the
// element: "messages[2].role is 'bot', expected system, user, assistant or tool".
#pragma once

#include <string>
#include <vector>

#include "kiln/base/json.h"
#include "kiln/text/chat_template.h"

namespace kiln {

std::vector<ChatMessage> chat_messages_from_json(const OrderedJson& messages,
                                                 const std::string& what);

// Each tool's definition (objects; their strings checked as valid UTF-8).
std::vector<OrderedJson> chat_tools_from_json(const OrderedJson& tools, const std::string& what);

// A tool call's arguments (an object, or a JSON string holding one) as the template renders them.
std::string tool_arguments_json(const OrderedJson& arguments, const std::string& what);

}  // namespace kiln
