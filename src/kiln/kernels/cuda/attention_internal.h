// What the CUDA attention kernels share (kernels/cuda/attention_*.cu): the layout of backward's
// scratch, the row dot products D = rowsum(dy * y) and the sum of per-query-head dK/dV over each
// kv group. Host declarations; the launchers enqueue on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <initializer_list>

#include "kiln/kernels/ops.h"

namespace kiln::cuda {

// Throws (KILN_CHECK) unless 0 < s.D <= max_head_dim and H is a multiple of KV > 0; `kernels`
// names the caller in the message ("reference", "flash").
void check_attention_shape(const AttnShape& s, int max_head_dim, const char* kernels);

// Throws unless flash_attention_supports(s) and every pointer is 16-byte aligned (the flash
// kernels load fp32 rows as float4).
void check_flash_shape(const AttnShape& s, std::initializer_list<const void*> pointers);

// backward's scratch, carved from attention_backward_scratch_bytes(s) bytes:
//   di       (B, H, T)     rowsum(dy * y) of every query row and head
//   dk_part, dv_part (B, T, KV * splits, D), splits = dkdv_head_splits(s): the flash dK/dV pass's
//            gradients from each part of a kv group's query heads, summed into dk, dv afterwards;
//            null when splits == 1 (written into dk, dv directly)
struct BackwardScratch {
  float* di;
  float* dk_part;
  float* dv_part;
};
BackwardScratch backward_scratch(void* scratch, const AttnShape& s);

// di (B, H, T) = sum over d of dy * y, both (B, T, H, D).
void attention_row_dot(float* di, const float* dy, const float* y, const AttnShape& s,
                       cudaStream_t stream);

// dkv (B, T, KV, D) = sum over r < splits of part (B, T, KV * splits, D) at [b, t, g * splits + r]
// (r ascending: a fixed order, so the sum is deterministic).
void attention_sum_parts(float* dkv, const float* part, const AttnShape& s, int splits,
                         cudaStream_t stream);

}  // namespace kiln::cuda
