// An independent reference for chunked cross-entropy (the CPU backend's chunks of rows, the
// vocabulary-parallel head's chunks): the same rows' loss and gradients from Backend::
// cross_entropy called on a few targeted rows at a time (every other target ignored in that
// call), so that no call has more than one chunk and no chunk boundary of the code under test
// falls where one of these calls' does.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kernels/ops.h"

namespace kiln::testing {

struct CeResult {
  double loss = 0;
  std::vector<float> dx;  // (N, C)
  std::vector<float> dw;  // (V, C)
};

// x (N, C), w (V, C), targets (N): the loss summed over the targeted rows, dx and dw for the loss
// scaled by `scale`, from calls of at most `per_call` targeted rows each (each a single chunk:
// ce_chunk_rows(per_call, V) == per_call, checked).
inline CeResult cross_entropy_in_calls(const Backend& be, const std::vector<float>& x,
                                       const std::vector<float>& w,
                                       const std::vector<int32_t>& targets, int C, int V,
                                       float scale, int per_call) {
  const int N = static_cast<int>(targets.size());
  EXPECT_EQ(ce_chunk_rows(per_call, V), static_cast<size_t>(per_call)) << "a call of one chunk";
  CeResult out;
  out.dx.assign(static_cast<size_t>(N) * C, 0.0f);
  out.dw.assign(static_cast<size_t>(V) * C, 0.0f);
  std::vector<float> dx(out.dx.size());
  std::vector<int32_t> part(N);
  int i = 0;
  while (i < N) {
    // Rows [i, j) hold per_call targets (or the rest); only theirs count in this call.
    std::fill(part.begin(), part.end(), kIgnoreIndex);
    int taken = 0, j = i;
    for (; j < N && taken < per_call; ++j) {
      part[j] = targets[j];
      taken += targets[j] != kIgnoreIndex ? 1 : 0;
    }
    be.cross_entropy(&out.loss, dx.data(), out.dw.data(), x.data(), w.data(), part.data(), N, taken,
                     C, V, scale);
    be.synchronize();
    // dx is zero outside this call's targeted rows: the calls' dx add up to the whole one.
    for (size_t k = 0; k < dx.size(); ++k) out.dx[k] += dx[k];
    i = j;
  }
  return out;
}

// max |got - want| / max |want| over n values.
inline double max_rel_error(const float* got, const float* want, size_t n) {
  double err = 0, ref = 0;
  for (size_t k = 0; k < n; ++k) {
    err = std::max(err, std::fabs(static_cast<double>(got[k]) - want[k]));
    ref = std::max(ref, std::fabs(static_cast<double>(want[k])));
  }
  return err / std::max(ref, 1e-30);
}

}  // namespace kiln::testing
