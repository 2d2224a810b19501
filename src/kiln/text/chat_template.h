// The Qwen2.5 chat template (without tools), rendered natively:
//
//   <|im_start|>system\n{system, or the default below}<|im_end|>\n
//   <|im_start|>{role}\n{content}<|im_end|>\n            for each other message
//   <|im_start|>assistant\n                               if add_generation_prompt
//
// A system message counts as the system prompt only when it comes first; later ones render like
// any other message. Consecutive "tool" messages render inside one user turn, each as
// "\n<tool_response>\n{content}\n</tool_response>", as the Qwen2.5 template does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/json.h"
#include "kiln/text/tokenizer.h"

namespace kiln {

inline constexpr std::string_view kQwenDefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

struct ChatMessage {
  std::string role;  // system, user, assistant or tool
  std::string content;
};

std::string render_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt);

// The ids of the rendered conversation. With parse_special_in_content, this is
// tokenizer.encode(render_chat(...)). Without, only the template's own <|im_start|> and
// <|im_end|> are special tokens: special-token text inside a message's content is encoded as
// plain text, so a message cannot forge a turn.
std::vector<int32_t> encode_chat(const Tokenizer& tokenizer,
                                 const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, bool parse_special_in_content = true);

// The messages of a JSON array [{"role": ..., "content": ...}, ...]; errors name `what` and
// the element ("<what>[2].role is 'bot', expected system, user, assistant or tool").
std::vector<ChatMessage> chat_messages_from_json(const Json& messages, const std::string& what);

}  // namespace kiln
