// Building a chat's pieces (chat_template.h), shared by the renderers. Internal to kiln_text.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/text/chat_template.h"

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

// The three renderers (qwen25_chat.cc, qwen3_chat.cc, llama3_chat.cc).
const ChatTemplate& qwen25_chat_template();
const ChatTemplate& qwen3_chat_template();
const ChatTemplate& llama3_chat_template();

// Errors for what a template does not render: "messages[2].reasoning_content: the qwen2.5 chat
// template does not render it".
[[noreturn]] void refuse_field(const ChatTemplate& tmpl, size_t message, std::string_view field);

}  // namespace kiln::text
