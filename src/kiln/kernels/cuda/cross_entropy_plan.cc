#include "kiln/kernels/cuda/cross_entropy_plan.h"

#include <algorithm>

#include "kiln/base/error.h"

namespace kiln::cuda {

CePlan ce_plan(int N, int V) {
  KILN_CHECK(N >= 0 && V > 0, "cross_entropy: N {} V {}", N, V);
  CePlan p;
  if (N == 0) return p;
  const size_t budget_rows = kCeLogitsBudgetBytes / (sizeof(float) * static_cast<size_t>(V));
  const int rows = static_cast<int>(
      std::max<size_t>(budget_rows / 16 * 16, static_cast<size_t>(kCeMinChunkRows)));
  if (N <= rows) {
    p.chunk_rows = N;
    p.chunks = 1;
    return p;
  }
  // Balanced chunks: the fewest that fit the budget, each rounded up to 16 rows (<= rows, which
  // is a multiple of 16), so the padding is under 16 rows per chunk.
  p.chunks = (N + rows - 1) / rows;
  const int even = (N + p.chunks - 1) / p.chunks;
  p.chunk_rows = (even + 15) / 16 * 16;
  p.chunks = (N + p.chunk_rows - 1) / p.chunk_rows;
  return p;
}

}  // namespace kiln::cuda
