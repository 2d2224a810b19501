// The CUDA backend's attention kernels (kernels/cuda/attention_*.cu), with the semantics of the
// Backend methods of the same names (kernels/ops.h): fp32 q, k, v, y, lse and gradients in device
// memory, enqueued on `stream`. Two implementations:
//   flash_*      tensor cores (mma.sync bf16, fp32 accumulation), head_dim 64 and 128; tiles are
//                rounded to bf16 as they are staged in shared memory; blocks wholly before a
//                query block's first doc_start are skipped. Backward is deterministic (no float
//                atomics: dK/dV and dQ are computed by separate passes).
//   reference_*  plain fp32 tiled kernels for any head_dim <= 256: the check of the flash
//                kernels on a GPU, and the fallback for other head sizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kiln/kernels/cuda/scratch_sizes.h"
#include "kiln/kernels/ops.h"

namespace kiln::cuda {

// Whether the flash kernels take this shape (head_dim 64 or 128).
bool flash_attention_supports(const AttnShape& s);

void flash_attention_forward(float* y, float* lse, const float* q, const float* k, const float* v,
                             const int32_t* doc_start, const AttnShape& s, cudaStream_t stream);
// `scratch` is device memory of attention_backward_scratch_bytes(s) (the row dot products
// D = rowsum(dy * y), and whatever else the passes keep).
void flash_attention_backward(float* dq, float* dk, float* dv, const float* dy, const float* q,
                              const float* k, const float* v, const float* y, const float* lse,
                              const int32_t* doc_start, const AttnShape& s, void* scratch,
                              cudaStream_t stream);

void reference_attention_forward(float* y, float* lse, const float* q, const float* k,
                                 const float* v, const int32_t* doc_start, const AttnShape& s,
                                 cudaStream_t stream);
void reference_attention_backward(float* dq, float* dk, float* dv, const float* dy, const float* q,
                                  const float* k, const float* v, const float* y, const float* lse,
                                  const int32_t* doc_start, const AttnShape& s, void* scratch,
                                  cudaStream_t stream);

// Bytes of `scratch` either backward needs for shape s: attention_backward_scratch_bytes(s)
// (scratch_sizes.h).

// Backend::attention_decode: n_q new tokens over a KV cache (fp32).
void attention_decode(float* y, const float* q, const float* k_cache, const float* v_cache, int n_q,
                      int past, int H, int KV, int D, cudaStream_t stream);

}  // namespace kiln::cuda
