// PEFT adapter directories, as PeftModel.save_pretrained writes them and PEFT and vLLM load them:
//   adapter_config.json        the LoraConfig, keys sorted, indent 2 (peft_type LORA, r,
//                              lora_alpha, lora_dropout, target_modules, use_rslora, ...);
//   adapter_model.safetensors  per adapted module, with the adapter's name stripped:
//     base_model.model.model.layers.{i}.{self_attn|mlp}.{target}.lora_A.weight  (r, in)
//     base_model.model.model.layers.{i}.{self_attn|mlp}.{target}.lora_B.weight  (out, r)
//                              in name order, metadata {"format": "pt"}.
// kiln writes the tokenizer files and chat template beside them (HfModelFiles), so a serving
// stack loads base + adapter with the template the run trained on. Independent of how the
// trainer lays adapters out: LoraTensors is plain host fp32 per (layer, target).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/base/checksum.h"
#include "kiln/base/file.h"
#include "kiln/model/config.h"
#include "kiln/model/lora_config.h"
#include "kiln/tensor/dtype.h"

namespace kiln {

class HfModelFiles;

inline constexpr const char* kPeftConfigFile = "adapter_config.json";
inline constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";
// kiln's own file beside them: {"base_fingerprint": {"bytes": N, "xxh3": "16 hex digits"}}, the
// fingerprint of the base the adapters were trained on (base_fingerprint.h). PEFT ignores it.
inline constexpr const char* kKilnBaseFile = "kiln_base.json";

struct PeftAdapterConfig {
  LoraConfig lora;                      // r, lora_alpha, lora_dropout, target_modules, use_rslora
  std::string base_model_name_or_path;  // "" when null or absent
  // kKilnBaseFile's fingerprint of the base they were trained on; nullopt without that file (an
  // adapter PEFT wrote, or kiln before it recorded one).
  std::optional<FileDigest> base_fingerprint;
};

// Reads `dir`/adapter_config.json (and kKilnBaseFile when there). Accepts what kiln's LoRA is:
// peft_type LORA, bias none, fan_in_fan_out false, target_modules a list of module names kiln
// knows (or "all-linear"), init_lora_weights a plain initialisation; PEFT's defaults for absent
// keys (r 8, lora_alpha 8, lora_dropout 0, use_rslora false). Every field is on an allow-list
// (peft_adapter.cc: the fields kiln reads, metadata, and features kiln does not implement, which
// must keep their default); any other field set to a value is refused, naming the file and field,
// as is a regular expression for target_modules. A directory without adapter_config.json: "DIR:
// not a PEFT adapter directory (no adapter_config.json)".
PeftAdapterConfig read_peft_adapter_config(const fs::path& dir);

// The adapter agrees with the recipe's lora section on r, lora_alpha, target_modules and
// use_rslora; otherwise fails with one line naming `what` (the adapter config file), the field
// and both values. (Dropout may change between runs: it is not part of the weights.)
void check_peft_adapter_matches(const PeftAdapterConfig& adapter, const LoraConfig& lora,
                                const std::string& what);

// Host fp32 adapter weights of a model: for each layer and each of the config's targets,
// A (r, in) and B (out, r), row-major, as PEFT stores them.
struct LoraFactors {
  std::vector<float> a;  // (r, in)
  std::vector<float> b;  // (out, r)
  bool operator==(const LoraFactors&) const = default;
};

class LoraTensors {
 public:
  LoraTensors() = default;
  // Zeros, shaped for `model` and `lora`.
  LoraTensors(const ModelConfig& model, const LoraConfig& lora);

  int64_t num_layers() const { return num_layers_; }
  int64_t rank() const { return rank_; }
  const std::vector<LoraTarget>& targets() const { return targets_; }
  // The target's factors in `layer`; the target must be one of targets().
  LoraFactors& at(int64_t layer, LoraTarget t);
  const LoraFactors& at(int64_t layer, LoraTarget t) const;
  // (r, in) for A, (out, r) for B.
  std::vector<int64_t> shape(LoraTarget t, LoraFactor f) const;
  bool operator==(const LoraTensors&) const = default;

 private:
  size_t target_index(LoraTarget t) const;
  size_t index(int64_t layer, LoraTarget t) const;
  int64_t num_layers_ = 0, rank_ = 0;
  std::vector<LoraTarget> targets_;
  std::vector<std::pair<int64_t, int64_t>> shapes_;  // per target, as targets_: (out, in)
  std::vector<LoraFactors> blocks_;                  // [layer][target]
};

struct PeftAdapter {
  PeftAdapterConfig config;
  LoraTensors tensors;
};

// Reads `dir` (adapter_config.json and adapter_model.safetensors, F32, BF16 or F16) for the base
// `model`. Every tensor must be an A or B of a target in target_modules, of a layer the base has,
// with its shape; every one of them must be there. Errors are one line naming the file, the
// tensor and the expected shape.
PeftAdapter read_peft_adapter(const fs::path& dir, const ModelConfig& model);

// Writes a PEFT adapter directory `out` as one (write_dir_atomic: a failure leaves nothing, or
// the old directory, in its place): adapter_config.json (`lora`, base_model_name_or_path
// `base_name`), adapter_model.safetensors in `dtype` (F32, BF16 or F16), the tokenizer files
// and chat template of `files`, and with `base` kKilnBaseFile. A non-finite value in the tensors
// is an error naming the tensor.
void write_peft_adapter(const fs::path& out, const LoraConfig& lora, const std::string& base_name,
                        const LoraTensors& tensors, DType dtype, const HfModelFiles& files,
                        const std::optional<FileDigest>& base = std::nullopt);

// The first non-finite value of `tensors`' layer `layer`: an error "<what>: tensor <PEFT name>
// holds <value> at element <i>".
void check_lora_finite(const LoraTensors& tensors, int64_t layer, const std::string& what);

// adapter_config.json's contents for `lora` as PEFT's save_pretrained writes them (keys sorted,
// indent 2, ASCII), what vLLM's PEFTHelper reads included.
std::string peft_adapter_config_json(const LoraConfig& lora, const std::string& base_name);

}  // namespace kiln
