// The cross-entropy of a vocabulary split across ranks, one block of logits at a time (see
// Backend::ce_part_max). Rows are independent: each pass is a parallel loop over rows.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/softmax_row.h"
#include "kiln/kernels/cpu/vec_math.h"

namespace kiln {

namespace {
// Whether target t of the row lies in the block's columns [v0, v0 + m).
bool in_block(int32_t t, int v0, int m) { return t != kIgnoreIndex && t >= v0 && t < v0 + m; }

// lg (m) becomes scale * (exp(lg - lse) - onehot(t - v0)).
void row_grad(float* lg, int m, float lse, float scale, int32_t t, int v0) {
#pragma omp simd
  for (int j = 0; j < m; ++j) lg[j] = scale * vec::exp(lg[j] - lse);
  if (in_block(t, v0, m)) lg[t - v0] -= scale;
}
}  // namespace

void CpuBackend::ce_part_max(float* row_max, const float* logits, int n, int m, int ld,
                             bool accumulate) const {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i) {
    const float mx = kiln::row_max(logits + static_cast<size_t>(i) * ld, m);
    row_max[i] = accumulate ? std::max(row_max[i], mx) : mx;
  }
}

void CpuBackend::ce_part_sumexp(float* sums, const float* logits, const float* row_max,
                                const int32_t* targets, int v0, int n, int m, int ld) const {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i) {
    const float* lg = logits + static_cast<size_t>(i) * ld;
    sums[2 * i] += static_cast<float>(row_sum_exp(lg, m, row_max[i]));
    if (in_block(targets[i], v0, m)) sums[2 * i + 1] += lg[targets[i] - v0];
  }
}

void CpuBackend::ce_part_grad(float* logits, double* loss_sum, const float* row_max,
                              const float* sums, const int32_t* targets, int v0, int n, int m,
                              int ld, float scale, const float* row_weight, int loss_begin,
                              int loss_end) const {
  double loss = 0;
#pragma omp parallel for schedule(static) reduction(+ : loss)
  for (int i = 0; i < n; ++i) {
    float* lg = logits + static_cast<size_t>(i) * ld;
    const int32_t t = targets[i];
    if (t == kIgnoreIndex) {
      std::fill(lg, lg + m, 0.0f);
      continue;
    }
    if (i >= loss_begin && i < loss_end) {
      loss += static_cast<double>(row_max[i]) + std::log(static_cast<double>(sums[2 * i])) -
              static_cast<double>(sums[2 * i + 1]);
    }
    const float lse = row_max[i] + std::log(sums[2 * i]);
    row_grad(lg, m, lse, row_weight != nullptr ? scale * row_weight[i] : scale, t, v0);
  }
  if (loss_sum != nullptr) *loss_sum += loss;
}

void CpuBackend::ce_part_row_loss(float* row_loss, const float* row_max, const float* sums,
                                  const int32_t* targets, int n) const {
  for (int i = 0; i < n; ++i) {
    row_loss[i] = targets[i] == kIgnoreIndex
                      ? 0.0f
                      : static_cast<float>(static_cast<double>(row_max[i]) +
                                           std::log(static_cast<double>(sums[2 * i])) -
                                           static_cast<double>(sums[2 * i + 1]));
  }
}

}  // namespace kiln
