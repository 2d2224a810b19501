// The CUDA backend's fused LM head + cross-entropy (Backend::cross_entropy, kernels/ops.h): the
// (N, V) logits never exist, only one chunk of them (cross_entropy_plan.h). Per call:
//   rows    = the rows with a target (`targeted` of them, counted by the caller), compacted in
//             order by a prefix sum, padded with -1 to whole chunks
//   per chunk of rows:
//     xr      (r, C) = x[rows]                       (bf16 under bf16)
//     logits  (r, V) = xr @ w^T                      (cuBLASLt, fp32 accumulation)
//     loss[i] = -log softmax(logits[i])[target]      (one block per row)
//     dlogits (r, V) = scale * (softmax - onehot)    (bf16 under bf16; in place under fp32)
//     dxr     (r, C) = dlogits @ w, scattered to dx[rows] (dx zero elsewhere)
//     dw      (V, C) += dlogits^T @ xr
//   *loss_sum += sum of the row losses, in double, in one fixed order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kiln/kernels/cuda/device_scratch.h"
#include "kiln/kernels/cuda/gemm_lt.h"
#include "kiln/kernels/ops.h"

namespace kiln::cuda {

// Device memory the cross-entropy keeps between calls (grown to the largest call), the
// backend's own (counted in its memory statistics).
struct CrossEntropyScratch {
  explicit CrossEntropyScratch(const Backend& be)
      : rows(be), row_loss(be), xr(be), logits(be), dlogits_bf16(be), dxr(be), w_bf16(be) {}
  DeviceScratch rows, row_loss, xr, logits, dlogits_bf16, dxr, w_bf16;
};

struct CrossEntropyArgs {
  double* loss_sum;
  float* dx;  // null: loss only
  float* dw;
  const float* x;
  ConstDevPtr w;
  const int32_t* targets;
  int N, targeted, C, V;  // targeted: rows whose target is not kIgnoreIndex
  float scale;
};

// bf16: the products take bf16 inputs (w used as it is when BF16, rounded once per call when
// F32); otherwise everything is fp32 and w must be F32.
void cross_entropy(const CrossEntropyArgs& a, bool bf16, LtGemm& gemm, CrossEntropyScratch& sc,
                   cudaStream_t stream);

}  // namespace kiln::cuda
