// LoRA as PEFT defines it: for a target projection W (out, in) with bias b,
//   y = W x + b + s * B (A dropout(x)),  A (r, in), B (out, r),
// s = alpha / r, or alpha / sqrt(r) with rslora. The targets are Hugging Face module names; every
// family kiln trains has all seven (a Llama, Qwen2 or Qwen3 decoder layer's linear projections),
// and "all-linear" names them all (PEFT's shorthand: every linear layer but the LM head).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/named_values.h"
#include "kiln/model/config.h"

namespace kiln {

// In the order of a decoder layer's forward.
enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumLoraTargets = 7;

// The module names, as PEFT's target_modules and adapter tensor names spell them.
inline constexpr std::array<Named<LoraTarget>, kNumLoraTargets> kLoraTargetNames{{
    {LoraTarget::kQ, "q_proj"},
    {LoraTarget::kK, "k_proj"},
    {LoraTarget::kV, "v_proj"},
    {LoraTarget::kO, "o_proj"},
    {LoraTarget::kGate, "gate_proj"},
    {LoraTarget::kUp, "up_proj"},
    {LoraTarget::kDown, "down_proj"},
}};
inline constexpr const char* kAllLinear = "all-linear";

// "self_attn.q_proj", "mlp.down_proj": the module's path inside model.layers.N.
std::string lora_module_path(LoraTarget t);

enum class LoraFactor { kA, kB };
// The PEFT name of a target's A or B in a layer, as adapter_model.safetensors and the adapter
// units (lora_layout.h) spell it: "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight".
std::string peft_tensor_name(int64_t layer, LoraTarget t, LoraFactor f);

// A target's W (out, in) for a model: q (Q, C), k and v (KV, C), o (C, Q), gate and up (I, C),
// down (C, I).
struct LoraShape {
  int64_t out = 0, in = 0;
};
LoraShape lora_shape(const ModelConfig& c, LoraTarget t);

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16.0;
  double dropout = 0.0;
  std::vector<LoraTarget> targets;  // distinct, in LoraTarget order
  bool rslora = false;
  bool operator==(const LoraConfig&) const = default;

  double scale() const;  // s
  bool has(LoraTarget t) const;
  // Checks rank > 0, alpha > 0, 0 <= dropout < 1 and at least one target; errors name `what`
  // (the file and section) and the key.
  void validate(const std::string& what) const;
  // The rank fits `model`: at most min(in, out) of the smallest target, where s B A reaches full
  // rank (a larger one adds parameters, memory and no capacity; 1e9 would only fail allocating).
  // Otherwise an error naming `key` (the recipe's lora.rank), the bound and that target's shape.
  void check_rank_fits(const ModelConfig& model, const std::string& key) const;
};

// The targets named by `names` (module names, or the single name "all-linear"), distinct and in
// LoraTarget order. An unknown name fails naming `what`, the name and the allowed ones.
std::vector<LoraTarget> resolve_lora_targets(const std::vector<std::string>& names,
                                             const std::string& what);
// The targets' module names, in order (PEFT's target_modules).
std::vector<std::string> lora_target_names(const std::vector<LoraTarget>& targets);

// Parameters the adapters add: per layer, per target, r * (in + out).
int64_t lora_parameter_count(const ModelConfig& c, const LoraConfig& lora);

}  // namespace kiln
