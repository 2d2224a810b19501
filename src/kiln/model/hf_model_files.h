// The files of a Hugging Face model directory besides the weights: what transformers, vLLM and
// kiln itself need to load, prompt and stop a model. One writer serves every directory kiln
// produces (a run's final/, each checkpoint, `kiln export`), so they hold the same set.
#pragma once

#include <functional>
#include <string>

#include "kiln/base/json.h"
#include "kiln/model/layout.h"
#include "kiln/tensor/dtype.h"

namespace kiln {

// Where a model directory's files come from.
struct HfModelFiles {
  fs::path base;       // the base model directory: config.json, tokenizer and generation files
  fs::path tokenizer;  // the tokenizer.json to ship; empty: base/tokenizer.json (if any)
};

// Tokenizer files other than tokenizer.json and tokenizer_config.json that are copied as they
// are when the base has them (vocab.json, merges.txt, special_tokens_map.json, ...).
const std::vector<std::string>& hf_extra_tokenizer_files();

// The tokenizer.json a recipe-style setting names: "" = model_dir/tokenizer.json, a directory =
// its tokenizer.json, else the file itself.
fs::path tokenizer_json_path(const fs::path& model_dir, const fs::path& tokenizer_setting);

// The base's config.json exactly as written (every field, in its order), with only torch_dtype
// set to `torch_dtype` ("float32", "bfloat16", "float16").
nlohmann::ordered_json hf_config_json(const fs::path& base_dir, const std::string& torch_dtype);
const char* torch_dtype_name(DType dtype);

// Writes into `out` (created if needed), each atomically:
//   tokenizer.json         copied from src.tokenizer (or the base's);
//   tokenizer_config.json  the base's byte for byte when it has a chat template (in the file or
//                          beside it as chat_template.jinja/.json); else the base's plus kiln's
//                          Qwen2.5 template; else one derived from tokenizer.json;
//   generation_config.json the base's, else {bos_token_id, eos_token_id: [config's eos ids,
//                          the tokenizer's eos]} (and pad_token_id when the tokenizer has one);
//   every file of hf_extra_tokenizer_files() the base has.
// Without any tokenizer.json only generation_config.json is written (and a warning logged).
// Not config.json or the weights: save_hf_model_dir writes those.
void write_hf_model_files(const fs::path& out, const HfModelFiles& src);

// A complete model directory: write_hf_model_files, then config.json (hf_config_json of the
// base) and the weights last (read_unit(u, out) fills unit u when first needed), so a directory
// whose weights are complete has everything else.
void save_hf_model_dir(const fs::path& out, const HfModelFiles& src, const ParamLayout& layout,
                       const std::function<void(int unit, float* out)>& read_unit, DType dtype,
                       uint64_t max_shard_bytes = 5'000'000'000);

}  // namespace kiln
