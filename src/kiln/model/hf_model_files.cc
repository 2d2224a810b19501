#include "kiln/model/hf_model_files.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/model/hf_checkpoint.h"
#include "kiln/text/qwen25_template.h"

namespace kiln {

namespace {

using OJson = nlohmann::ordered_json;

OJson read_ordered(const fs::path& p) {
  try {
    return OJson::parse(read_file(p));
  } catch (const OJson::exception& e) {
    fail("{}: invalid JSON: {}", p.string(), e.what());
  }
}

void write_json(const fs::path& p, const OJson& j) { write_file_atomic(p, j.dump(2) + "\n"); }

void copy_atomic(const fs::path& from, const fs::path& to) {
  if (fs::exists(to) && fs::equivalent(from, to)) return;
  write_file_atomic(to, read_file(from));
}

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
std::optional<int64_t> token_id(const OJson& tok, const std::string& text) {
  if (tok.contains("added_tokens")) {
    for (const auto& t : tok.at("added_tokens")) {
      if (t.value("content", std::string()) == text) return t.at("id").get<int64_t>();
    }
  }
  if (tok.contains("model") && tok.at("model").contains("vocab")) {
    const OJson& vocab = tok.at("model").at("vocab");
    if (vocab.is_object() && vocab.contains(text)) return vocab.at(text).get<int64_t>();
  }
  return std::nullopt;
}

// tokenizer_config.json for a base that has none: what transformers' Qwen2TokenizerFast needs
// beside tokenizer.json, with the Qwen2.5 chat template.
OJson derived_tokenizer_config(const OJson& tok, const OJson& config) {
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
  auto present = [&](const char* s) -> OJson {
    return token_id(tok, s) ? OJson(s) : OJson(nullptr);
  };
  OJson eos = present("<|im_end|>");
  if (eos.is_null()) eos = present("<|endoftext|>");
  return {{"add_bos_token", false},
          {"add_prefix_space", false},
          {"added_tokens_decoder", decoder},
          {"bos_token", nullptr},
          {"chat_template", std::string(qwen25_chat_template_jinja())},
          {"clean_up_tokenization_spaces", false},
          {"eos_token", eos},
          {"errors", "replace"},
          {"model_max_length", config.value("max_position_embeddings", int64_t{32768})},
          {"pad_token", present("<|endoftext|>")},
          {"split_special_tokens", false},
          {"tokenizer_class", "Qwen2Tokenizer"},
          {"unk_token", nullptr}};
}

// Writes tokenizer_config.json; returns its contents (for the eos token).
OJson write_tokenizer_config(const fs::path& out, const fs::path& tok_dir, const OJson& tok,
                             const OJson& config) {
  const fs::path base_cfg = tok_dir / "tokenizer_config.json";
  if (!fs::exists(base_cfg)) {
    OJson cfg = derived_tokenizer_config(tok, config);
    write_json(out / "tokenizer_config.json", cfg);
    return cfg;
  }
  OJson cfg = read_ordered(base_cfg);
  if (has_chat_template(tok_dir, &cfg)) {
    copy_atomic(base_cfg, out / "tokenizer_config.json");  // byte for byte
  } else {
    cfg["chat_template"] = std::string(qwen25_chat_template_jinja());
    write_json(out / "tokenizer_config.json", cfg);
  }
  return cfg;
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

OJson derived_generation_config(const OJson& config, const OJson* tok, const OJson* tok_cfg) {
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

nlohmann::ordered_json hf_config_json(const fs::path& base_dir, const std::string& torch_dtype) {
  const fs::path p = base_dir / "config.json";
  if (!fs::exists(p)) fail("{}: no such file", p.string());
  OJson c = read_ordered(p);
  if (!c.is_object()) fail("{}: expected a JSON object", p.string());
  c["torch_dtype"] = torch_dtype;                     // replaces in place, keeping the order
  if (c.contains("dtype")) c["dtype"] = torch_dtype;  // transformers >= 4.56 spells it so
  return c;
}

void write_hf_model_files(const fs::path& out, const HfModelFiles& src) {
  fs::create_directories(out);
  const OJson config = hf_config_json(src.base, "float32");
  const fs::path tok_json = tokenizer_json_path(src.base, src.tokenizer);
  if (!fs::is_regular_file(tok_json)) {
    KILN_LOG_WARN("{}: no tokenizer.json at {}; the model directory has no tokenizer", out.string(),
                  tok_json.string());
    write_json(out / "generation_config.json",
               fs::exists(src.base / "generation_config.json")
                   ? read_ordered(src.base / "generation_config.json")
                   : derived_generation_config(config, nullptr, nullptr));
    return;
  }
  const fs::path tok_dir = tok_json.parent_path();
  copy_atomic(tok_json, out / "tokenizer.json");
  const OJson tok = read_ordered(tok_json);
  const OJson tok_cfg = write_tokenizer_config(out, tok_dir, tok, config);
  for (const std::string& name : hf_extra_tokenizer_files()) {
    if (fs::is_regular_file(tok_dir / name)) copy_atomic(tok_dir / name, out / name);
  }
  if (fs::exists(src.base / "generation_config.json")) {
    copy_atomic(src.base / "generation_config.json", out / "generation_config.json");
  } else {
    write_json(out / "generation_config.json", derived_generation_config(config, &tok, &tok_cfg));
  }
}

void save_hf_model_dir(const fs::path& out, const HfModelFiles& src, const ParamLayout& layout,
                       const std::function<void(int unit, float* out)>& read_unit, DType dtype,
                       uint64_t max_shard_bytes) {
  write_hf_model_files(out, src);
  write_file_atomic(out / "config.json",
                    hf_config_json(src.base, torch_dtype_name(dtype)).dump(2) + "\n");
  save_hf_weights_streaming(out, layout, read_unit, dtype, max_shard_bytes);
}

}  // namespace kiln
