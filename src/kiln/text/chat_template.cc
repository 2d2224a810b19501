#include "kiln/text/chat_template.h"

#include <string_view>

#include "kiln/base/error.h"
#include "kiln/text/chat_pieces.h"

namespace kiln {

const ChatTemplate& chat_template(ChatTemplateId id) {
  switch (id) {
    case ChatTemplateId::kQwen25:
      return text::qwen25_chat_template();
    case ChatTemplateId::kQwen3:
      return text::qwen3_chat_template();
    case ChatTemplateId::kLlama3:
      return text::llama3_chat_template();
  }
  KILN_CHECK(false, "chat template id {}", static_cast<int>(id));
  return text::qwen25_chat_template();
}

const ChatTemplate* chat_template_named(std::string_view name) {
  for (const ChatTemplateId id :
       {ChatTemplateId::kQwen25, ChatTemplateId::kQwen3, ChatTemplateId::kLlama3}) {
    if (chat_template(id).name() == name) return &chat_template(id);
  }
  return nullptr;
}

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> kNames = {"qwen2.5", "qwen3", "llama3"};
  return kNames;
}

std::string render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                        const std::vector<OrderedJson>& tools, const ChatOptions& options) {
  std::string out;
  for (const ChatPiece& piece : tmpl.pieces(messages, tools, options)) out += piece.text;
  return out;
}

int32_t chat_special_token(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                           std::string_view token) {
  const int32_t id = tokenizer.token_id(token);
  if (id < 0) {
    fail("{}: no {} token, which the {} chat template needs", tokenizer.source(), token,
         tmpl.name());
  }
  return id;
}

std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                                 const std::vector<ChatMessage>& messages,
                                 const std::vector<OrderedJson>& tools, const ChatOptions& options,
                                 bool parse_special_in_content) {
  const std::vector<ChatPiece> pieces = tmpl.pieces(messages, tools, options);
  if (parse_special_in_content) {
    std::string text;
    for (const ChatPiece& piece : pieces) text += piece.text;
    return tokenizer.encode(text, true);
  }
  std::vector<int32_t> ids;
  std::string run;  // adjacent text pieces encode as one text, as the whole string would
  for (const ChatPiece& piece : pieces) {
    if (piece.kind == ChatPiece::Kind::kText) {
      run += piece.text;
      continue;
    }
    if (!run.empty()) tokenizer.encode(run, ids, false);
    run.clear();
    ids.push_back(chat_special_token(tokenizer, tmpl, piece.text));
  }
  if (!run.empty()) tokenizer.encode(run, ids, false);
  return ids;
}

void check_enable_thinking(const ChatTemplate& tmpl, const std::optional<bool>& enable_thinking,
                           std::string_view key) {
  if (enable_thinking && !tmpl.has_thinking()) {
    fail("{}: the {} chat template has no thinking mode", key, tmpl.name());
  }
}

namespace text {

void refuse_field(const ChatTemplate& tmpl, size_t message, std::string_view field) {
  fail("messages[{}].{}: the {} chat template does not render it", message, field, tmpl.name());
}

}  // namespace text
}  // namespace kiln
