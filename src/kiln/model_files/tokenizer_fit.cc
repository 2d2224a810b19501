#include "kiln/model_files/tokenizer_fit.h"

#include <algorithm>
#include <optional>
#include <string>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/text/chat_template_choice.h"
#include "kiln/text/tokenizer.h"
#include "kiln/text/tokenizer_config.h"

namespace kiln {

namespace {

// The tokens of a chat model the tokenizer lacks, each with the keys that name it, for one
// warning: "<|eot_id|> (eos_token_id, generation eos)".
class MissingTokens {
 public:
  explicit MissingTokens(const Tokenizer& tok) : tok_(tok) {}

  // The id of `text`, or -1 (noted as missing for `role`).
  int32_t id(std::string_view text, std::string_view role) {
    const int32_t id = tok_.token_id(text);
    if (id >= 0) return id;
    auto it = std::find_if(missing_.begin(), missing_.end(),
                           [&](const auto& m) { return m.first == text; });
    if (it == missing_.end()) it = missing_.insert(missing_.end(), {std::string(text), {}});
    it->second += (it->second.empty() ? "" : ", ") + std::string(role);
    return -1;
  }

  void warn(const std::filesystem::path& tokenizer_json, ChatTemplateId tmpl) const {
    if (missing_.empty()) return;
    std::string names;
    for (const auto& [text, roles] : missing_) {
      names += (names.empty() ? "" : ", ") + text + " (" + roles + ")";
    }
    KILN_LOG_WARN(
        "{}: no {}, which {} chat models use; the model's config.json and "
        "generation_config.json go without it",
        tokenizer_json.string(), names, chat_template(tmpl).name());
  }

 private:
  const Tokenizer& tok_;
  std::vector<std::pair<std::string, std::string>> missing_;  // token -> the keys naming it
};

}  // namespace

int64_t fitted_vocab_size(int64_t tokenizer_vocab) {
  return (tokenizer_vocab + kVocabMultiple - 1) / kVocabMultiple * kVocabMultiple;
}

ChatTemplateId family_chat_template(ModelFamily family) {
  switch (family) {
    case ModelFamily::kQwen2:
      return ChatTemplateId::kQwen25;
    case ModelFamily::kQwen3:
      return ChatTemplateId::kQwen3;
    case ModelFamily::kLlama:
      return ChatTemplateId::kLlama3;
  }
  KILN_CHECK(false, "model family {}", static_cast<int>(family));
  return ChatTemplateId::kQwen25;
}

const ChatModelTokens& chat_model_tokens(ChatTemplateId id) {
  // Qwen2.5-Instruct and Qwen3: bos 151643, eos 151645, generation eos [151645, 151643], pad
  // 151643. Llama 3.1-Instruct: bos 128000, eos 128009 (its tokenizer_config.json's eos_token),
  // generation eos [128001, 128008, 128009], no pad.
  static const ChatModelTokens kQwen = {
      "<|endoftext|>", "<|im_end|>", {"<|im_end|>", "<|endoftext|>"}, "<|endoftext|>"};
  static const ChatModelTokens kLlama3 = {
      "<|begin_of_text|>", "<|eot_id|>", {"<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"}, ""};
  return id == ChatTemplateId::kLlama3 ? kLlama3 : kQwen;
}

FittedTemplate fitted_chat_template(ModelFamily family, const std::filesystem::path& tokenizer_json,
                                    std::string_view template_setting) {
  if (!template_setting.empty()) {
    const ChatTemplate& named =
        choose_chat_template(tokenizer_json, template_setting, "--template");
    return {std::string(named.name()), named.id()};
  }
  const ModelChatTemplate own = model_chat_template(tokenizer_json);
  if (!own.where.empty()) return {"", own.known.value_or(family_chat_template(family))};
  const ChatTemplateId family_template = family_chat_template(family);
  return {std::string(chat_template(family_template).name()), family_template};
}

Json fit_special_tokens(Json& config, const Tokenizer& tok,
                        const std::filesystem::path& tokenizer_json, ChatTemplateId tmpl) {
  const Json tok_cfg = tokenizer_config_beside(tokenizer_json);
  const ChatModelTokens& want = chat_model_tokens(tmpl);
  MissingTokens missing(tok);
  const auto configured = [&](const char* key, std::string_view fallback, const char* role) {
    if (auto text = configured_token(tok_cfg, key); text && tok.token_id(*text) >= 0) {
      return tok.token_id(*text);
    }
    return missing.id(fallback, role);
  };
  const int32_t bos = configured("bos_token", want.bos, "bos_token_id");
  int32_t eos = configured("eos_token", want.eos, "eos_token_id");
  std::vector<int32_t> gen_eos;
  for (const std::string_view t : want.generation_eos) {
    if (const int32_t id = missing.id(t, "generation eos"); id >= 0) gen_eos.push_back(id);
  }
  if (eos < 0 && !gen_eos.empty()) eos = gen_eos.front();
  if (eos >= 0 && std::find(gen_eos.begin(), gen_eos.end(), eos) == gen_eos.end()) {
    gen_eos.insert(gen_eos.begin(), eos);
  }
  Json gen = Json::object();
  if (bos >= 0) {
    config["bos_token_id"] = bos;
    gen["bos_token_id"] = bos;
  } else {
    config.erase("bos_token_id");
  }
  if (eos >= 0) {
    config["eos_token_id"] = eos;
  } else {
    config.erase("eos_token_id");
  }
  if (!gen_eos.empty())
    gen["eos_token_id"] = gen_eos.size() == 1 ? Json(gen_eos[0]) : Json(gen_eos);
  if (!want.pad.empty()) {
    if (const int32_t pad = tok.token_id(want.pad); pad >= 0) gen["pad_token_id"] = pad;
  }
  missing.warn(tokenizer_json, tmpl);
  return gen;
}

}  // namespace kiln
