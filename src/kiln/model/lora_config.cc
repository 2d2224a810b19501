#include "kiln/model/lora_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kiln {

std::string lora_module_path(LoraTarget t) {
  const bool attention =
      t == LoraTarget::kQ || t == LoraTarget::kK || t == LoraTarget::kV || t == LoraTarget::kO;
  return std::string(attention ? "self_attn." : "mlp.") + name_of(kLoraTargetNames, t);
}

std::string peft_tensor_name(int64_t layer, LoraTarget t, LoraFactor f) {
  return fmt::format("base_model.model.model.layers.{}.{}.lora_{}.weight", layer,
                     lora_module_path(t), f == LoraFactor::kA ? 'A' : 'B');
}

LoraShape lora_shape(const ModelConfig& c, LoraTarget t) {
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  switch (t) {
    case LoraTarget::kQ:
      return {c.q_dim(), C};
    case LoraTarget::kK:
    case LoraTarget::kV:
      return {c.kv_dim(), C};
    case LoraTarget::kO:
      return {C, c.q_dim()};
    case LoraTarget::kGate:
    case LoraTarget::kUp:
      return {I, C};
    case LoraTarget::kDown:
      return {C, I};
  }
  KILN_CHECK(false, "unknown LoRA target");
  return {};
}

double LoraConfig::scale() const {
  return rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank);
}

bool LoraConfig::has(LoraTarget t) const {
  return std::find(targets.begin(), targets.end(), t) != targets.end();
}

void LoraConfig::validate(const std::string& what) const {
  if (rank <= 0) fail("{}: 'rank' must be a positive integer, got {}", what, rank);
  if (!(alpha > 0)) fail("{}: 'alpha' must be positive, got {}", what, alpha);
  if (!(dropout >= 0 && dropout < 1))
    fail("{}: 'dropout' must be in [0, 1), got {}", what, dropout);
  if (targets.empty())
    fail("{}: 'targets' names no module (use {} or some of {})", what, kAllLinear,
         allowed_names(kLoraTargetNames));
}

void LoraConfig::check_rank_fits(const ModelConfig& model, const std::string& key) const {
  if (targets.empty()) return;
  const auto fits = [&](LoraTarget t) {
    const LoraShape s = lora_shape(model, t);
    return std::min(s.in, s.out);
  };
  const LoraTarget smallest =
      *std::min_element(targets.begin(), targets.end(),
                        [&](LoraTarget a, LoraTarget b) { return fits(a) < fits(b); });
  if (rank <= fits(smallest)) return;
  const LoraShape s = lora_shape(model, smallest);
  fail(
      "{}: {} is more than {} (target {} is {} x {}, so s B A has at most that rank): lower it to "
      "at most min(in, out) of the smallest target",
      key, rank, fits(smallest), name_of(kLoraTargetNames, smallest), s.out, s.in);
}

std::vector<LoraTarget> resolve_lora_targets(const std::vector<std::string>& names,
                                             const std::string& what) {
  std::vector<bool> chosen(kNumLoraTargets, false);
  for (const auto& name : names) {
    if (name == kAllLinear) {
      if (names.size() != 1) fail("{}: '{}' stands alone in 'targets'", what, kAllLinear);
      chosen.assign(kNumLoraTargets, true);
      continue;
    }
    if (!is_named(kLoraTargetNames, name))
      fail("{}: target '{}' is not a module of this model (allowed: {}, or {})", what, name,
           allowed_names(kLoraTargetNames), kAllLinear);
    chosen[static_cast<int>(parse_named(kLoraTargetNames, name, what))] = true;
  }
  std::vector<LoraTarget> out;
  for (int t = 0; t < kNumLoraTargets; ++t)
    if (chosen[t]) out.push_back(static_cast<LoraTarget>(t));
  return out;
}

std::vector<std::string> lora_target_names(const std::vector<LoraTarget>& targets) {
  std::vector<std::string> out;
  for (LoraTarget t : targets) out.push_back(name_of(kLoraTargetNames, t));
  return out;
}

int64_t lora_parameter_count(const ModelConfig& c, const LoraConfig& lora) {
  int64_t per_layer = 0;
  for (LoraTarget t : lora.targets) {
    const LoraShape s = lora_shape(c, t);
    per_layer += lora.rank * (s.in + s.out);
  }
  return per_layer * c.num_hidden_layers;
}

}  // namespace kiln
