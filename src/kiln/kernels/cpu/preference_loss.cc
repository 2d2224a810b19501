// Backend::sequence_logps and preference_loss (ops.h) on the CPU: sequential loops in a fixed
// order (a handful of sequences per micro-batch), the pair's formulas from preference_terms.h.
#include <algorithm>

#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/preference_terms.h"

namespace kiln {

void CpuBackend::sequence_logps(double* seq, const float* row_loss, const int32_t* targets,
                                const int32_t* bounds, int S) const {
  for (int s = 0; s < S; ++s) {
    double logp = 0, n = 0;
    for (int32_t i = bounds[2 * s]; i < bounds[2 * s + 1]; ++i) {
      if (targets[i] == kIgnoreIndex) continue;
      logp -= row_loss[i];
      n += 1;
    }
    seq[2 * s] += logp;
    seq[2 * s + 1] += n;
  }
}

void CpuBackend::preference_loss(float* row_weight, double* sums, const double* seq,
                                 const double* ref_seq, const int32_t* bounds, int S,
                                 const PreferenceTerms& terms, int sum_begin, int sum_end) const {
  const bool simpo = terms.type == PreferenceLossType::kSimpo;
  for (int p = 0; p < S / 2; ++p) {
    const double* c = seq + 4 * p;  // chosen (logp, n), then rejected (logp, n)
    const double* rc = simpo ? nullptr : ref_seq + 4 * p;
    const bool valid = c[1] > 0 && c[3] > 0;
    PairTerms t;
    if (valid) t = pair_terms(terms, c[0], c[2], simpo ? 0 : rc[0], simpo ? 0 : rc[2], c[1], c[3]);
    if (row_weight != nullptr) {
      const float wc = static_cast<float>(-terms.scale * t.d_chosen);
      const float wr = static_cast<float>(-terms.scale * t.d_rejected);
      const int32_t* b = bounds + 4 * p;  // chosen [b0, b1), rejected [b2, b3)
      std::fill(row_weight + b[0], row_weight + b[1], wc);
      std::fill(row_weight + b[2], row_weight + b[3], wr);
    }
    if (sums == nullptr || !valid || p < sum_begin || p >= sum_end) continue;
    sums[kPrefLoss] += t.loss;
    sums[kPrefRewardChosen] += t.reward_chosen;
    sums[kPrefRewardRejected] += t.reward_rejected;
    sums[kPrefAccuracy] += t.reward_chosen > t.reward_rejected ? 1 : 0;
    sums[kPrefMargin] += t.reward_chosen - t.reward_rejected;
    sums[kPrefLogpChosen] += c[0];
    sums[kPrefLogpRejected] += c[2];
    sums[kPrefPairs] += 1;
  }
}

}  // namespace kiln
