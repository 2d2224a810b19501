// The optimizer's updates and gradient clipping over shard ranges (elementwise, so the result
// does not depend on how OpenMP splits the range).
#include <cmath>

#include "kiln/kernels/cpu/cpu_backend.h"

namespace kiln {

void CpuBackend::adamw_step(float* p, float* m, float* v, const float* g, size_t n,
                            const AdamWStep& s) const {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    m[i] = s.beta1 * m[i] + (1.0f - s.beta1) * gi;
    v[i] = s.beta2 * v[i] + (1.0f - s.beta2) * gi * gi;
    p[i] = p[i] * s.decay - s.step_size * m[i] / (std::sqrt(v[i]) * s.inv_sqrt_bc2 + s.eps);
  }
}

void CpuBackend::sgd_step(float* p, float* m, const float* g, size_t n, const SgdStep& s) const {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    float d = g[i] + s.weight_decay * p[i];
    if (s.momentum > 0) {
      m[i] = s.first ? d : s.momentum * m[i] + d;
      d = m[i];
    }
    p[i] -= s.lr * d;
  }
}

void CpuBackend::clip_by_norm(float* x, size_t n, const double* sq_norm, double max_norm) const {
  const double norm = std::sqrt(*sq_norm);
  if (norm > max_norm) scale(x, static_cast<float>(max_norm / (norm + 1e-6)), n);
}

}  // namespace kiln
