// The Qwen2.5 chat template, rendered natively (tests/fixtures/data/chat_template_ref.jsonl holds
// the real template's renderings, made by tools/qwen25_chat_template_ref.py):
//
//   <|im_start|>system\n{system, or the default below}{tools block}<|im_end|>\n
//   <|im_start|>{role}\n{content}<|im_end|>\n            user, later system, plain assistant
//   <|im_start|>assistant[\n{content}]{\n<tool_call>\n{"name": "...", "arguments": ...}\n
//     </tool_call> for each call}<|im_end|>\n              assistant with tool calls
//   <|im_start|>user{\n<tool_response>\n{content}\n</tool_response> for each consecutive tool
//     message}<|im_end|>\n
//   <|im_start|>assistant\n                               if add_generation_prompt
//
// A system message counts as the system prompt only when it comes first; later ones render like
// a user message. With tools, the system turn lists each tool's JSON in <tools></tools> and how
// to call them, as the template does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/text/tokenizer.h"

namespace kiln {

inline constexpr std::string_view kQwenDefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text, as the template's `arguments | tojson` renders it
  bool operator==(const ToolCall&) const = default;
};

struct ChatMessage {
  std::string role;  // system, user, assistant or tool
  std::string content;
  std::vector<ToolCall> tool_calls = {};  // assistant only
  bool operator==(const ChatMessage&) const = default;
};

// A piece of a rendered chat: text, or one of the template's own <|im_start|> / <|im_end|>.
// Pieces end at those tokens and after each assistant header "<|im_start|>assistant\n", where
// generation starts; `reply` marks what the model produces after that header (the assistant's
// content and tool calls, and the <|im_end|> that closes its turn).
struct ChatPiece {
  enum class Kind { kText, kImStart, kImEnd };
  Kind kind = Kind::kText;
  std::string text;  // the piece's text, "<|im_start|>" or "<|im_end|>" for those
  bool reply = false;
  bool operator==(const ChatPiece&) const = default;
};

// `tools`: each tool's definition as `tool | tojson` renders it (tojson.h).
std::vector<ChatPiece> chat_pieces(const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt,
                                   const std::vector<std::string>& tools = {});

std::string render_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        const std::vector<std::string>& tools = {});

// The ids of the rendered conversation. With parse_special_in_content, this is
// tokenizer.encode(render_chat(...)). Without, only the template's own <|im_start|> and
// <|im_end|> are special tokens: special-token text inside a message's content is encoded as
// plain text, so a message cannot forge a turn.
std::vector<int32_t> encode_chat(const Tokenizer& tokenizer,
                                 const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, bool parse_special_in_content = true,
                                 const std::vector<std::string>& tools = {});

}  // namespace kiln
