// Which tiles of causal document attention can hold a nonzero probability: the block-skip
// arithmetic of the CUDA attention kernels (kernels/cuda/attention_*.cu), plain C++ callable from
// host and device so that CI tests it without a GPU. Query row i attends key j when
// doc_start[i] <= j <= i < T (ops.h's attention contract).
#pragma once

#include "kiln/kernels/cuda/host_device.h"

namespace kiln::cuda {

// Blocks [begin, end) of some tiling; empty when end <= begin.
struct BlockRange {
  int begin, end;
};

// Whether query row i (with document start ds_i) attends key j in a sequence of T rows.
KILN_HOST_DEVICE inline bool attends(int i, int j, int ds_i, int T) {
  return i < T && j <= i && j >= ds_i;
}

// The key blocks (of bk keys) that query rows [i0, i0 + rows) can attend, min_ds the smallest
// doc_start of those rows below T: blocks wholly before min_ds or wholly after the last row are
// skipped. Empty when i0 >= T.
KILN_HOST_DEVICE inline BlockRange key_blocks_for_queries(int i0, int rows, int min_ds, int bk,
                                                          int T) {
  if (i0 >= T) return {0, 0};
  const int last = (i0 + rows < T ? i0 + rows : T) - 1;
  return {min_ds / bk, last / bk + 1};
}

// The query blocks (of br rows) that can attend keys [j0, j0 + bk): causal, so those holding a
// row at or after j0. Each is then checked with queries_see_keys against its own doc starts.
KILN_HOST_DEVICE inline BlockRange query_blocks_for_keys(int j0, int br, int T) {
  if (j0 >= T) return {0, 0};
  return {j0 / br, (T + br - 1) / br};
}

// Whether any query row of [i0, i0 + rows) (smallest doc start min_ds) can attend any key of
// [j0, j0 + bk): some row at or after j0, and a document starting at or before the last key.
KILN_HOST_DEVICE inline bool queries_see_keys(int i0, int rows, int min_ds, int j0, int bk, int T) {
  if (i0 >= T || j0 >= T) return false;
  const int last_row = (i0 + rows < T ? i0 + rows : T) - 1;
  return j0 <= last_row && min_ds <= j0 + bk - 1;
}

// Blocks of `size` covering n items.
KILN_HOST_DEVICE inline int blocks_of(int n, int size) { return (n + size - 1) / size; }

// The flash dK/dV pass runs a block per (64 keys, kv head, batch row) looping over the query heads
// of the kv head's group, or over 1 / splits of them (splits dividing H / KV, each part's
// gradients in scratch, added afterwards). The fewest splits giving at least kDkdvTargetBlocks
// blocks (a few per SM of a large GPU), else H / KV: a shape-only rule, so the scratch size
// (attention_backward_scratch_bytes) follows from the shape alone. 1 for a shape without kv
// heads, which the launchers' checks then reject (the scratch size is asked for first).
constexpr long long kDkdvTargetBlocks = 512;
constexpr int kDkdvKeys = 64;  // keys per dK/dV block
inline int dkdv_head_splits(int B, int T, int H, int KV) {
  if (KV <= 0) return 1;
  const int group = H / KV;
  const long long blocks = static_cast<long long>(B) * KV * blocks_of(T, kDkdvKeys);
  for (int splits = 1; splits < group; ++splits) {
    if (group % splits == 0 && blocks * splits >= kDkdvTargetBlocks) return splits;
  }
  return group < 1 ? 1 : group;
}

}  // namespace kiln::cuda
