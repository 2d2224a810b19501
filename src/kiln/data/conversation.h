// The conversation a line of a chat-like data format holds, before the template renders it:
//
//   chat         {"messages": [...] (chat_messages.h), "tools": [...] (optional)}
//   sharegpt     {"conversations": [{"from": ..., "value": "..."}, ...], "system": "..." and
//                "tools": [...] or a JSON string of that list (both optional)}; from is system
//                (first only), human or user, gpt or assistant, function_call (value: the JSON
//                of {"name", "arguments"} or of a list of them: an assistant turn of tool calls),
//                observation or tool (a tool result)
//   instruction  {"instruction": "...", "input": "..." (optional), "output": "...",
//                "system": "..." (optional), "history": [["question", "answer"], ...]
//                (optional, earlier turns)}: [system, history turns..., user: instruction +
//                "\n\n" + input (when non-empty), assistant: output]
//
// Errors are one line, "<where>: <field>: <problem>", e.g.
// "train.json:12: conversations[3].from: expected system, human, gpt, function_call,
// observation or tool, got 'bot'".
#pragma once

#include <string>
#include <vector>

#include "kiln/base/json.h"
#include "kiln/text/chat_template.h"

namespace kiln {

struct Conversation {
  std::vector<ChatMessage> messages;
  std::vector<OrderedJson> tools;  // each tool's definition
};

Conversation chat_conversation(const OrderedJson& line, const std::string& where);
Conversation sharegpt_conversation(const OrderedJson& line, const std::string& where);
Conversation instruction_conversation(const OrderedJson& line, const std::string& where);

}  // namespace kiln
