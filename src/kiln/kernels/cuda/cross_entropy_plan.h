// How the CUDA cross-entropy (the fused LM head and loss, cross_entropy.h) splits the rows that
// have a target into chunks (host-only, tested in CI): every chunk has the same number of rows,
// so its three GEMMs have one shape each (one heuristic query, kept). How many rows have a target
// (`targeted`) is counted by the caller on the host from the batch (rows_with_target(),
// kernels/ops.h), so planning never reads the device mid-step. The compacted rows are padded with
// -1 to chunks * chunk_rows; a padding row has zero inputs and zero gradients, so its cost is
// only the wasted products.
#pragma once

#include <cstddef>

namespace kiln::cuda {

// fp32 logits of one chunk (r, V): at most this much, but at least kCeMinChunkRows rows.
inline constexpr size_t kCeLogitsBudgetBytes = size_t{256} << 20;
inline constexpr int kCeMinChunkRows = 128;

struct CePlan {
  int chunk_rows = 0;  // N when one chunk takes all, else a multiple of 16
  int chunks = 0;
  int padded_rows() const { return chunk_rows * chunks; }
};
// For N rows (those with a target) over a vocabulary of V; N == 0 gives no chunks.
CePlan ce_plan(int N, int V);

}  // namespace kiln::cuda
