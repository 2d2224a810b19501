// Row reductions of the CPU cross-entropy passes (cross_entropy.cc, cross_entropy_part.cc), so
// the fused and the split-vocabulary softmax compute a row's max and sum of exponentials alike.
#pragma once

#include <algorithm>
#include <limits>

#include "kiln/kernels/cpu/vec_math.h"

namespace kiln {

// The max of x (n); -infinity for an empty row.
inline float row_max(const float* x, int n) {
  if (n == 0) return -std::numeric_limits<float>::infinity();
  float m = x[0];
#pragma omp simd reduction(max : m)
  for (int j = 1; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

// Sum of exp(x - m) over x (n): sums of 1024 floats (vectorised, each term <= 1 when m is the
// max) accumulate in double.
inline double row_sum_exp(const float* x, int n, float m) {
  double sum = 0;
  for (int j0 = 0; j0 < n; j0 += 1024) {
    const int j1 = std::min(n, j0 + 1024);
    float part = 0;
#pragma omp simd reduction(+ : part)
    for (int j = j0; j < j1; ++j) part += vec::exp(x[j] - m);
    sum += part;
  }
  return sum;
}

}  // namespace kiln
