// Building a chat's pieces (chat_template.h), shared by the renderers. Internal to kiln_text.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/text/chat_template.h"
#include "kiln/text/tojson.h"

namespace kiln::text {

// Appends pieces; adjacent text with the same `reply` joins into one piece, so a rendering
// tokenizes as its whole string does except where the prompt ends and a reply begins.
class PieceWriter {
 public:
  void special(std::string_view token, bool reply = false) {
    out_.push_back({ChatPiece::Kind::kSpecial, std::string(token), reply});
  }
  void text(std::string_view s, bool reply = false) {
    if (!out_.empty() && out_.back().kind == ChatPiece::Kind::kText && out_.back().reply == reply) {
      out_.back().text += s;
      return;
    }
    out_.push_back({ChatPiece::Kind::kText, std::string(s), reply});
  }
  std::vector<ChatPiece> take() { return std::move(out_); }

 private:
  std::vector<ChatPiece> out_;
};

// ChatML, the turn format both Qwen templates share.
inline constexpr std::string_view kImStart = "<|im_start|>";
inline constexpr std::string_view kImEnd = "<|im_end|>";

// <|im_start|>{role}\n{content}<|im_end|>\n
inline void chatml_turn(PieceWriter& p, std::string_view role, std::string_view content) {
  p.special(kImStart);
  p.text(std::string(role) + "\n" + std::string(content));
  p.special(kImEnd);
  p.text("\n");
}

// messages[i], a tool result, as the Qwen templates render it: consecutive results share one user
// turn, each in <tool_response> tags.
inline void chatml_tool_response(PieceWriter& p, const std::vector<ChatMessage>& messages,
                                 size_t i) {
  const bool first = i == 0 || messages[i - 1].role != "tool";
  const bool last = i + 1 == messages.size() || messages[i + 1].role != "tool";
  if (first) {
    p.special(kImStart);
    p.text("user");
  }
  p.text("\n<tool_response>\n" + messages[i].content + "\n</tool_response>");
  if (last) {
    p.special(kImEnd);
    p.text("\n");
  }
}

// The tool listing the Qwen templates put in their system turn: "# Tools\n\n...<tools>", one
// JSON line per tool, then "</tools>" and how to call one.
inline std::string qwen_tools_text(const std::vector<OrderedJson>& tools) {
  std::string s =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const OrderedJson& t : tools) s.append("\n").append(tojson(t));
  s += "\n</tools>\n\nFor each function call, return a json object with function name and "
       "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
       "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
  return s;
}

// The three renderers (qwen25_chat.cc, qwen3_chat.cc, llama3_chat.cc).
const ChatTemplate& qwen25_chat_template();
const ChatTemplate& qwen3_chat_template();
const ChatTemplate& llama3_chat_template();

// Errors for what a template does not render: "messages[2].reasoning_content: the qwen2.5 chat
// template does not render it".
[[noreturn]] void refuse_field(const ChatTemplate& tmpl, size_t message, std::string_view field);

}  // namespace kiln::text
