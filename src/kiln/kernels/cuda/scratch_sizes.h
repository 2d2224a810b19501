// How much scratch the CUDA backend's ops take (and the dtype its activations are stored in),
// host-only (no CUDA headers): every rule that sizes a buffer CudaBackend allocates for itself
// (cuBLASLt's workspace, DeviceScratch's rounding, the cross-entropy's chunk buffers, attention
// backward's scratch). It is compiled into every build, CUDA or not, so the counting backend
// (kernels/device/counting_backend.h) plans a GPU run with the very functions the GPU run sizes its
// buffers with.
#pragma once

#include <cstddef>

#include "kiln/kernels/cuda/cross_entropy_plan.h"
#include "kiln/kernels/ops.h"

namespace kiln::cuda {

// The storage of activations that only feed products (CudaBackend::activation_dtype()).
inline DType activation_dtype(bool bf16) { return bf16 ? DType::BF16 : DType::F32; }

// cuBLASLt's workspace, one per backend, taken at the first GEMM.
inline constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

// DeviceScratch (device_scratch.h) allocates requests rounded up to this, so slowly growing ones
// do not reallocate every call.
inline constexpr size_t kScratchGranule = size_t{2} << 20;
inline size_t scratch_capacity(size_t bytes) {
  return (bytes + kScratchGranule - 1) / kScratchGranule * kScratchGranule;
}

// The cross-entropy's buffers for one call (CrossEntropyScratch, cross_entropy.h), in bytes; 0
// where the call takes none.
struct CeScratchBytes {
  size_t rows = 0, row_loss = 0;  // (padded rows) compacted row ids, each row's loss (double)
  size_t xr = 0;                  // (chunk, C) gathered rows, product dtype
  size_t logits = 0;              // (chunk, V) fp32
  size_t dlogits_bf16 = 0;        // (chunk, V) bf16 under bf16 (fp32: in place in logits)
  size_t dxr = 0;                 // (chunk, C) fp32
  size_t w_bf16 = 0;              // (V, C) bf16: an F32 weight rounded for bf16 products
};
// For a plan `p` over a vocabulary of V and C columns; grad: dx is asked for; w_f32: the weight
// comes in fp32.
CeScratchBytes ce_scratch_bytes(const CePlan& p, int C, int V, bool bf16, bool grad, bool w_f32);

// Attention backward's scratch (attention_internal.h's BackwardScratch): di (B, H, T), and,
// when the dK/dV pass splits a kv group's heads, its two parts, each 256-byte aligned.
size_t attention_backward_di_bytes(const AttnShape& s);
size_t attention_backward_part_bytes(const AttnShape& s);  // 0 without splits
size_t attention_backward_scratch_bytes(const AttnShape& s);

}  // namespace kiln::cuda
