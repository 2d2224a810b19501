#include "kiln/text/tokenizer_config.h"

namespace kiln {

Json tokenizer_config_beside(const std::filesystem::path& tokenizer_json) {
  const auto cfg_path = tokenizer_json.parent_path() / "tokenizer_config.json";
  Json cfg = Json::object();
  if (std::filesystem::is_regular_file(cfg_path)) cfg = read_json_file(cfg_path);
  return cfg.is_object() ? cfg : Json::object();
}

std::optional<std::string> configured_token(const Json& cfg, const char* key) {
  const auto it = cfg.find(key);
  if (it == cfg.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && it->at("content").is_string()) {
    return it->at("content").get<std::string>();
  }
  return std::nullopt;
}

}  // namespace kiln
