#include "kiln/model_files/hf_model_files.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "kiln/base/atomic_dir.h"
#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/model_files/hf_checkpoint.h"
#include "kiln/model_files/tokenizer_fit.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/chat_template_choice.h"

namespace kiln {

namespace {

using OJson = nlohmann::ordered_json;

// Small files keep their key order (config.json, tokenizer_config.json); tokenizer.json is
// parsed unordered, which is ~100x faster on an 11 MB file and all a token lookup needs.
template <typename J>
J parse_json_file(const fs::path& p, const std::string& text) {
  try {
    return J::parse(text);
  } catch (const typename J::exception& e) {
    fail("{}: invalid JSON: {}", p.string(), e.what());
  }
}

std::string json_text(const OJson& j) { return j.dump(2) + "\n"; }

bool has_chat_template(const fs::path& tok_dir, const OJson* tokenizer_config) {
  if (tokenizer_config && tokenizer_config->contains("chat_template")) return true;
  return fs::exists(tok_dir / "chat_template.jinja") || fs::exists(tok_dir / "chat_template.json");
}

// A special token's text from tokenizer_config.json: "<|im_end|>" or {"content": "<|im_end|>"}.
std::optional<std::string> token_text(const OJson& cfg, const char* key) {
  if (!cfg.contains(key)) return std::nullopt;
  const OJson& v = cfg.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) {
    return v.at("content").get<std::string>();
  }
  return std::nullopt;
}

// The id of `text` among tokenizer.json's added tokens or its model vocabulary.
std::optional<int64_t> token_id(const nlohmann::json& tok, const std::string& text) {
  if (tok.contains("added_tokens")) {
    for (const auto& t : tok.at("added_tokens")) {
      if (t.value("content", std::string()) == text) return t.at("id").get<int64_t>();
    }
  }
  if (tok.contains("model") && tok.at("model").contains("vocab")) {
    const nlohmann::json& vocab = tok.at("model").at("vocab");
    if (vocab.is_object() && vocab.contains(text)) return vocab.at(text).get<int64_t>();
  }
  return std::nullopt;
}

// tokenizer_config.json for a base that has none: what transformers' tokenizer class needs beside
// tokenizer.json (Qwen2TokenizerFast for the Qwen templates, PreTrainedTokenizerFast for
// Llama 3's), with the chat template `chat` and its tokens.
OJson derived_tokenizer_config(const nlohmann::json& tok, const OJson& config,
                               const ChatTemplate& chat) {
  OJson decoder = OJson::object();
  if (tok.contains("added_tokens")) {
    for (const auto& t : tok.at("added_tokens")) {
      decoder[std::to_string(t.at("id").get<int64_t>())] = {
          {"content", t.at("content")},
          {"lstrip", t.value("lstrip", false)},
          {"normalized", t.value("normalized", false)},
          {"rstrip", t.value("rstrip", false)},
          {"single_word", t.value("single_word", false)},
          {"special", t.value("special", true)}};
    }
  }
  auto present = [&](std::string_view s) -> OJson {
    return token_id(tok, std::string(s)) ? OJson(s) : OJson(nullptr);
  };
  // The template's models' eos, else the first of its end tokens the tokenizer has.
  const ChatModelTokens& tokens = chat_model_tokens(chat.id());
  OJson eos = present(tokens.eos);
  for (const std::string_view t : chat.stop_tokens()) {
    if (eos.is_null()) eos = present(t);
  }
  const int64_t max_length = config.value("max_position_embeddings", int64_t{32768});
  if (chat.id() == ChatTemplateId::kLlama3) {
    return {{"added_tokens_decoder", decoder},
            {"bos_token", present(tokens.bos)},
            {"chat_template", std::string(chat.jinja())},
            {"clean_up_tokenization_spaces", true},
            {"eos_token", eos},
            {"model_max_length", max_length},
            {"tokenizer_class", "PreTrainedTokenizerFast"}};
  }
  return {{"add_bos_token", false},
          {"add_prefix_space", false},
          {"added_tokens_decoder", decoder},
          {"bos_token", nullptr},
          {"chat_template", std::string(chat.jinja())},
          {"clean_up_tokenization_spaces", false},
          {"eos_token", eos},
          {"errors", "replace"},
          {"model_max_length", max_length},
          {"pad_token", present(tokens.pad)},
          {"split_special_tokens", false},
          {"tokenizer_class", "Qwen2Tokenizer"},
          {"unk_token", nullptr}};
}

// tokenizer_config.json's bytes and contents (for the eos token); `tok` parses tokenizer.json
// when a derivation needs it.
std::pair<std::string, OJson> tokenizer_config(const fs::path& tok_dir,
                                               const std::function<const nlohmann::json&()>& tok,
                                               const OJson& config, const ChatTemplate& chat) {
  const fs::path base_cfg = tok_dir / "tokenizer_config.json";
  if (!fs::exists(base_cfg)) {
    OJson cfg = derived_tokenizer_config(tok(), config, chat);
    return {json_text(cfg), cfg};
  }
  std::string text = read_file(base_cfg);
  OJson cfg = parse_json_file<OJson>(base_cfg, text);
  if (has_chat_template(tok_dir, &cfg)) return {std::move(text), cfg};  // byte for byte
  cfg["chat_template"] = std::string(chat.jinja());
  return {json_text(cfg), cfg};
}

// Makes `chat` the chat template of the tokenizer files `files` (name -> bytes) read from
// `tok_dir`, when the base's own is another: tokenizer_config.json's chat_template becomes its
// published text, and a chat_template.jinja or .json (which transformers reads first) is left
// out. Returns what it replaced: the base's template's name, "template at PATH" when kiln does not
// know it, or "" when nothing was replaced.
std::string replace_chat_template(std::vector<std::pair<std::string, std::string>>& files,
                                  const fs::path& tok_dir, const ChatTemplate& chat) {
  const ModelChatTemplate own = model_chat_template(tok_dir);
  if (own.where.empty() || own.known == chat.id()) return {};
  std::erase_if(files, [](const auto& f) {
    return f.first == "chat_template.jinja" || f.first == "chat_template.json";
  });
  for (auto& [name, bytes] : files) {
    if (name != "tokenizer_config.json") continue;
    OJson cfg = parse_json_file<OJson>(tok_dir / name, bytes);
    cfg["chat_template"] = std::string(chat.jinja());
    bytes = json_text(cfg);
  }
  return own.known ? std::string(chat_template(*own.known).name()) : "template at " + own.where;
}

// config.json's eos_token_id: an int, a list of ints or absent.
std::vector<int64_t> config_eos_ids(const OJson& config) {
  std::vector<int64_t> ids;
  if (!config.contains("eos_token_id")) return ids;
  const OJson& e = config.at("eos_token_id");
  if (e.is_number_integer()) ids.push_back(e.get<int64_t>());
  if (e.is_array()) {
    for (const auto& v : e) {
      if (v.is_number_integer()) ids.push_back(v.get<int64_t>());
    }
  }
  return ids;
}

OJson derived_generation_config(const OJson& config, const nlohmann::json* tok,
                                const OJson* tok_cfg) {
  std::vector<int64_t> eos;
  std::optional<int64_t> pad;
  if (tok && tok_cfg) {
    if (auto text = token_text(*tok_cfg, "eos_token")) {
      if (auto id = token_id(*tok, *text)) eos.push_back(*id);
    }
    if (auto text = token_text(*tok_cfg, "pad_token")) pad = token_id(*tok, *text);
  }
  // The config's own eos ids, where they name a token of the model (kiln init's generic config
  // names Qwen's 151643 whatever the vocabulary).
  const int64_t vocab = config.value("vocab_size", int64_t{0});
  for (int64_t id : config_eos_ids(config)) {
    const bool known = id >= 0 && (vocab == 0 || id < vocab);
    if (known && std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  }
  OJson g = OJson::object();
  const OJson* bos = config.contains("bos_token_id") ? &config.at("bos_token_id") : nullptr;
  if (bos && bos->is_number_integer() && (vocab == 0 || bos->get<int64_t>() < vocab)) {
    g["bos_token_id"] = *bos;
  }
  if (!eos.empty()) g["eos_token_id"] = eos.size() == 1 ? OJson(eos[0]) : OJson(eos);
  if (pad) g["pad_token_id"] = *pad;
  return g;
}

}  // namespace

const std::vector<std::string>& hf_extra_tokenizer_files() {
  static const std::vector<std::string> kFiles = {
      "vocab.json",          "merges.txt",         "special_tokens_map.json", "added_tokens.json",
      "chat_template.jinja", "chat_template.json", "tokenizer.model"};
  return kFiles;
}

fs::path tokenizer_json_path(const fs::path& model_dir, const fs::path& tokenizer_setting) {
  if (tokenizer_setting.empty()) return model_dir / "tokenizer.json";
  if (fs::is_directory(tokenizer_setting)) return tokenizer_setting / "tokenizer.json";
  return tokenizer_setting;
}

const char* torch_dtype_name(DType dtype) {
  return dtype == DType::BF16 ? "bfloat16" : dtype == DType::F16 ? "float16" : "float32";
}

HfModelFiles HfModelFiles::read(const fs::path& base, const fs::path& tokenizer_setting,
                                const std::string& chat_template_setting) {
  const ChatTemplate* chat = chat_template_setting.empty()
                                 ? &chat_template(ChatTemplateId::kQwen25)
                                 : chat_template_named(chat_template_setting);
  if (!chat) {
    fail("chat template '{}': expected {}", chat_template_setting, chat_template_choices());
  }
  HfModelFiles f;
  const fs::path cfg_path = base / "config.json";
  if (!fs::exists(cfg_path)) fail("{}: no such file", cfg_path.string());
  f.config_ = parse_json_file<OJson>(cfg_path, read_file(cfg_path));
  if (!f.config_.is_object()) fail("{}: expected a JSON object", cfg_path.string());
  const fs::path gen_path = base / "generation_config.json";
  const bool has_gen = fs::is_regular_file(gen_path);
  const fs::path tok_json = tokenizer_json_path(base, tokenizer_setting);
  if (!fs::is_regular_file(tok_json)) {
    f.missing_tokenizer_ = tok_json;
    f.generation_config_ = has_gen
                               ? read_file(gen_path)
                               : json_text(derived_generation_config(f.config_, nullptr, nullptr));
    return f;
  }
  const fs::path tok_dir = tok_json.parent_path();
  f.files_.emplace_back("tokenizer.json", read_file(tok_json));
  std::optional<nlohmann::json> tok;  // parsed on first need only
  auto parsed = [&]() -> const nlohmann::json& {
    if (!tok) tok = parse_json_file<nlohmann::json>(tok_json, f.files_.front().second);
    return *tok;
  };
  auto [cfg_text, tok_cfg] = tokenizer_config(tok_dir, parsed, f.config_, *chat);
  f.files_.emplace_back("tokenizer_config.json", std::move(cfg_text));
  for (const std::string& name : hf_extra_tokenizer_files()) {
    if (fs::is_regular_file(tok_dir / name)) f.files_.emplace_back(name, read_file(tok_dir / name));
  }
  if (!chat_template_setting.empty()) {
    f.replaced_template_ = replace_chat_template(f.files_, tok_dir, *chat);
  }
  f.generation_config_ = has_gen
                             ? read_file(gen_path)
                             : json_text(derived_generation_config(f.config_, &parsed(), &tok_cfg));
  return f;
}

nlohmann::ordered_json HfModelFiles::config_json(const std::string& torch_dtype) const {
  OJson c = config_;
  c["torch_dtype"] = torch_dtype;                     // replaces in place, keeping the order
  if (c.contains("dtype")) c["dtype"] = torch_dtype;  // transformers >= 4.56 spells it so
  return c;
}

void HfModelFiles::write(const fs::path& out, const std::string& torch_dtype) const {
  write_tokenizer(out);
  write_file_atomic(out / "generation_config.json", generation_config_);
  write_file_atomic(out / "config.json", json_text(config_json(torch_dtype)));
}

void HfModelFiles::write_tokenizer(const fs::path& out) const {
  if (!missing_tokenizer_.empty()) {
    KILN_LOG_WARN("{}: no tokenizer.json at {}; the directory has no tokenizer", out.string(),
                  missing_tokenizer_.string());
  }
  fs::create_directories(out);
  for (const auto& [name, bytes] : files_) write_file_atomic(out / name, bytes);
}

void save_hf_model_dir(const fs::path& out, const HfModelFiles& files, const ParamLayout& layout,
                       const std::function<void(int unit, float* out)>& read_unit, DType dtype,
                       uint64_t max_shard_bytes) {
  write_dir_atomic(out, [&](const fs::path& tmp) {
    files.write(tmp, torch_dtype_name(dtype));
    save_hf_weights_streaming(tmp, layout, read_unit, dtype, max_shard_bytes);
  });
}

}  // namespace kiln
