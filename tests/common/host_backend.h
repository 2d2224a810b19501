// The CPU backend's scalar-result ops read back to the host, for kernel tests: on the
// synchronous CPU backend device memory is host memory, so a host double serves as the device
// accumulator.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/kernels/ops.h"

namespace kiln::testing {

// The loss sum of Backend::cross_entropy.
inline double cross_entropy_sum(const Backend& be, float* dx, float* dw, const float* x,
                                const float* w, const int32_t* targets, int N, int C, int V,
                                float scale) {
  double loss = 0;
  be.cross_entropy(&loss, dx, dw, x, w, targets, N, rows_with_target(targets, N), C, V, scale);
  be.synchronize();
  return loss;
}

inline double sum_squares(const Backend& be, const float* x, size_t n) {
  double s = 0;
  be.sum_squares(&s, x, n);
  be.synchronize();
  return s;
}

}  // namespace kiln::testing
