// The files of a Hugging Face model directory besides the weights: what transformers, vLLM and
// kiln itself need to load, prompt and stop a model. One writer serves every directory kiln
// produces (a run's final/, each checkpoint, `kiln export`), so they hold the same set.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/base/json.h"
#include "kiln/model/layout.h"
#include "kiln/tensor/dtype.h"

namespace kiln {

// What a model directory kiln writes holds besides the weights, read once from the base model (and
// the tokenizer setting) when a run or an export starts: every later save writes these bytes, so
// a base that moves or is unmounted mid-run cannot fail a checkpoint, and no save parses the
// tokenizer again (an 11 MB tokenizer.json is copied byte for byte).
//   config.json            the base's, every field in its order; only torch_dtype (and dtype)
//                          set at write time;
//   tokenizer.json         the tokenizer setting's (or the base's), byte for byte;
//   tokenizer_config.json  the base's byte for byte when it has a chat template (in the file or
//                          beside it as chat_template.jinja/.json) and no other is asked for;
//                          else the base's plus the published text of the chat template asked
//                          for (data.template, --template; qwen2.5 when empty), which replaces
//                          the base's own (a chat_template.jinja/.json, which transformers reads
//                          first, is then left out); else one derived from tokenizer.json with it;
//   generation_config.json the base's byte for byte, else {bos_token_id, eos_token_id: [config's
//                          eos ids, the tokenizer's eos]} (and pad_token_id when the tokenizer
//                          has one);
//   every file of hf_extra_tokenizer_files() the tokenizer's directory has.
// Without any tokenizer.json only generation_config.json is written (and a warning logged).
class HfModelFiles {
 public:
  // Reads `base` (config.json required) and the tokenizer `tokenizer_setting` names
  // (tokenizer_json_path). tokenizer.json is parsed only to derive a missing
  // tokenizer_config.json or generation_config.json. `chat_template` (data.template,
  // --template: a template's name) is the directory's chat template, replacing the base's own
  // when that is another; "" keeps the base's own, or adds qwen2.5 when it has none.
  static HfModelFiles read(const fs::path& base, const fs::path& tokenizer_setting = {},
                           const std::string& chat_template = {});

  // The base's chat template that `chat_template` replaced: its name ("qwen2.5") or, when kiln
  // does not know it, "template at PATH"; empty when nothing was replaced.
  const std::string& replaced_chat_template() const { return replaced_template_; }
  // Whether there is a tokenizer.json (and so a chat template) to write.
  bool has_tokenizer() const { return missing_tokenizer_.empty(); }

  // The base's config.json with torch_dtype set ("float32", "bfloat16", "float16").
  nlohmann::ordered_json config_json(const std::string& torch_dtype) const;
  // Writes every file above into `out` (created if needed), each atomically; config.json last.
  void write(const fs::path& out, const std::string& torch_dtype) const;
  // Only the tokenizer files (tokenizer.json, tokenizer_config.json with the chat template, the
  // extra files): what a PEFT adapter directory holds beside the adapter (model/peft_adapter.h).
  void write_tokenizer(const fs::path& out) const;

 private:
  nlohmann::ordered_json config_;
  std::vector<std::pair<std::string, std::string>> files_;  // the tokenizer's: name -> bytes
  std::string generation_config_;                           // generation_config.json
  fs::path missing_tokenizer_;  // the tokenizer.json looked for, when there was none
  std::string replaced_template_;
};

// Tokenizer files other than tokenizer.json and tokenizer_config.json that are copied as they
// are when the base has them (vocab.json, merges.txt, special_tokens_map.json, ...).
const std::vector<std::string>& hf_extra_tokenizer_files();

// The tokenizer.json a recipe-style setting names: "" = model_dir/tokenizer.json, a directory =
// its tokenizer.json, else the file itself.
fs::path tokenizer_json_path(const fs::path& model_dir, const fs::path& tokenizer_setting);

const char* torch_dtype_name(DType dtype);

// A complete model directory, written as one (base/atomic_dir.h: a reader, or a failure midway,
// finds the old `out` or the whole new one, never a mix): files.write (config.json with
// `dtype`), then the weights (read_unit(u, out) fills unit u when first needed).
void save_hf_model_dir(const fs::path& out, const HfModelFiles& files, const ParamLayout& layout,
                       const std::function<void(int unit, float* out)>& read_unit, DType dtype,
                       uint64_t max_shard_bytes = 5'000'000'000);

}  // namespace kiln
