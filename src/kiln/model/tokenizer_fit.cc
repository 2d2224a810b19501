#include "kiln/model/tokenizer_fit.h"

#include <optional>
#include <string>

#include "kiln/text/tokenizer.h"

namespace kiln {

namespace {

// A special token's text from tokenizer_config.json: "<|im_end|>" or {"content": "<|im_end|>"}.
std::optional<std::string> configured_token(const Json& cfg, const char* key) {
  const auto it = cfg.find(key);
  if (it == cfg.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && it->at("content").is_string()) {
    return it->at("content").get<std::string>();
  }
  return std::nullopt;
}

// The id of the first of `texts` the tokenizer has, or -1.
int32_t first_present(const Tokenizer& tok,
                      std::initializer_list<std::optional<std::string>> texts) {
  for (const auto& t : texts) {
    if (!t) continue;
    if (const int32_t id = tok.token_id(*t); id >= 0) return id;
  }
  return -1;
}

}  // namespace

int64_t fitted_vocab_size(int64_t tokenizer_vocab) {
  return (tokenizer_vocab + kVocabMultiple - 1) / kVocabMultiple * kVocabMultiple;
}

void set_special_token_ids(Json& config, const Tokenizer& tok,
                           const std::filesystem::path& tokenizer_json) {
  Json tok_cfg = Json::object();
  const auto cfg_path = tokenizer_json.parent_path() / "tokenizer_config.json";
  if (std::filesystem::is_regular_file(cfg_path)) tok_cfg = read_json_file(cfg_path);
  if (!tok_cfg.is_object()) tok_cfg = Json::object();
  const int32_t bos =
      first_present(tok, {configured_token(tok_cfg, "bos_token"), std::string("<|endoftext|>")});
  const int32_t eos = first_present(tok, {configured_token(tok_cfg, "eos_token"),
                                          std::string("<|im_end|>"), std::string("<|endoftext|>")});
  for (const auto& [key, id] : {std::pair{"bos_token_id", bos}, std::pair{"eos_token_id", eos}}) {
    if (id >= 0) {
      config[key] = id;
    } else {
      config.erase(key);
    }
  }
}

}  // namespace kiln
