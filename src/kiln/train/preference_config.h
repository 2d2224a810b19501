// The recipe's dpo section: preference tuning (DPO and its variants, as TRL defines them:
// kernels/preference_terms.h holds the formulas). A section present, even empty, turns it on
// with TRL's defaults (sigmoid, beta 0.1, no label smoothing, SimPO's gamma 0.5); the reference
// is model.path's own weights ("base"), or another Hugging Face directory of the same shape;
// with a lora section it is always the base with the adapters off (no second copy of the model).
#pragma once

#include <array>
#include <string>

#include "kiln/base/named_values.h"
#include "kiln/kernels/preference_terms.h"

namespace kiln {

inline constexpr std::array<Named<PreferenceLossType>, 4> kPreferenceLossNames = {{
    {PreferenceLossType::kSigmoid, "sigmoid"},
    {PreferenceLossType::kIpo, "ipo"},
    {PreferenceLossType::kHinge, "hinge"},
    {PreferenceLossType::kSimpo, "simpo"},
}};

// TRL's metrics of a preference step (and, prefixed "eval_", of an evaluation), each the mean of
// its sum over the pairs: metrics.jsonl's and TensorBoard's names.
struct PreferenceMetric {
  PreferenceSum sum;
  const char* name;
};
inline constexpr std::array<PreferenceMetric, 6> kPreferenceMetrics = {{
    {kPrefRewardChosen, "rewards/chosen"},
    {kPrefRewardRejected, "rewards/rejected"},
    {kPrefAccuracy, "rewards/accuracies"},
    {kPrefMargin, "rewards/margins"},
    {kPrefLogpChosen, "logps/chosen"},
    {kPrefLogpRejected, "logps/rejected"},
}};

// dpo.reference's value for model.path's own weights.
inline constexpr const char* kReferenceBase = "base";

struct DpoConfig {
  PreferenceLossType loss_type = PreferenceLossType::kSigmoid;  // dpo.loss_type
  double beta = 0.1;                                            // dpo.beta, > 0
  double label_smoothing = 0;              // dpo.label_smoothing in [0, 0.5): sigmoid and simpo
  double simpo_gamma = 0.5;                // dpo.simpo_gamma, >= 0: SimPO's target margin
  std::string reference = kReferenceBase;  // dpo.reference: base, or a directory (absolute)
  // dpo.precompute_reference: the reference's log-probabilities computed once before step 1
  // (train/reference_table.h) instead of a reference forward in every step.
  bool precompute_reference = false;
  bool operator==(const DpoConfig&) const = default;

  // Whether the loss reads a reference model (every type but SimPO).
  bool uses_reference() const { return loss_type != PreferenceLossType::kSimpo; }
  // Whether the steps read the reference from a table computed before step 1.
  bool precomputed() const { return uses_reference() && precompute_reference; }
  // Whether every step runs the reference's forward.
  bool live_reference() const { return uses_reference() && !precompute_reference; }
  // The backend's terms, every pair's gradient scaled by `scale` (1 / the step's pairs).
  PreferenceTerms terms(double scale) const {
    return {loss_type, beta, label_smoothing, simpo_gamma, scale};
  }
};

}  // namespace kiln
