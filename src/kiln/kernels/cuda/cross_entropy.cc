#include "kiln/kernels/cuda/cross_entropy.h"

#include "kiln/base/error.h"
#include "kiln/kernels/cuda/cross_entropy_kernels.h"
#include "kiln/kernels/cuda/cross_entropy_plan.h"
#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/linear_gemms.h"
#include "kiln/kernels/cuda/pointwise_ops.h"
#include "kiln/kernels/cuda/scratch_sizes.h"

namespace kiln::cuda {

namespace {
// The per-call buffers, taken from the scratch.
struct CeBuffers {
  int32_t* rows;
  double* row_loss;
  void* xr;       // (chunk, C), f32 or bf16
  float* logits;  // (chunk, V)
  void* dlogits;  // (chunk, V): logits itself under fp32, a bf16 copy under bf16
  float* dxr;     // (chunk, C)
  const void* w;  // (V, C) in the product dtype
};

CeBuffers take_buffers(const CrossEntropyArgs& a, const CePlan& p, bool bf16,
                       CrossEntropyScratch& sc, cudaStream_t stream) {
  const bool w_f32 = a.w.dtype == DType::F32;
  const CeScratchBytes n = ce_scratch_bytes(p, a.C, a.V, bf16, a.dx != nullptr, w_f32);
  CeBuffers b{};
  b.rows = static_cast<int32_t*>(sc.rows.get(n.rows));
  b.row_loss = static_cast<double*>(sc.row_loss.get(n.row_loss));
  b.xr = sc.xr.get(n.xr);
  b.logits = static_cast<float*>(sc.logits.get(n.logits));
  b.dlogits = b.logits;
  if (n.dlogits_bf16 > 0) b.dlogits = sc.dlogits_bf16.get(n.dlogits_bf16);
  if (n.dxr > 0) b.dxr = static_cast<float*>(sc.dxr.get(n.dxr));
  b.w = a.w.data;
  if (n.w_bf16 > 0) {
    auto* w16 = static_cast<uint16_t*>(sc.w_bf16.get(n.w_bf16));
    cast_f32_to_bf16(w16, a.w.f32(), static_cast<size_t>(a.V) * a.C, stream);
    b.w = w16;
  }
  return b;
}

// One chunk of r rows starting at compacted row r0.
void run_chunk(const CrossEntropyArgs& a, const CeBuffers& b, int r0, int r, bool bf16,
               LtGemm& gemm, cudaStream_t stream) {
  const DType in = bf16 ? DType::BF16 : DType::F32;
  const int32_t* rows = b.rows + r0;
  double* row_loss = b.row_loss + r0;
  if (bf16) {
    ce_gather_rows_bf16(static_cast<uint16_t*>(b.xr), a.x, rows, r, a.C, stream);
  } else {
    ce_gather_rows_f32(static_cast<float*>(b.xr), a.x, rows, r, a.C, stream);
  }
  // logits (r, V) = xr (r, C) @ w^T, w: (V, C)
  gemm.run(linear_forward_spec(r, a.C, a.V, in, false), b.xr, b.w, b.logits, nullptr, stream);
  if (a.dx == nullptr) {
    ce_softmax_rows(row_loss, b.logits, a.targets, rows, r, a.V, stream);
    return;
  }
  if (bf16) {
    ce_softmax_grad_rows_bf16(row_loss, static_cast<uint16_t*>(b.dlogits), b.logits, a.targets,
                              rows, r, a.V, a.scale, stream);
  } else {
    ce_softmax_grad_rows_f32(row_loss, b.logits, b.logits, a.targets, rows, r, a.V, a.scale,
                             stream);
  }
  // dxr (r, C) = dlogits (r, V) @ w (V, C)
  gemm.run(linear_dx_spec(r, a.C, a.V, in, false), b.dlogits, b.w, b.dxr, nullptr, stream);
  ce_scatter_rows(a.dx, b.dxr, rows, r, a.C, stream);
  // dw (V, C) += dlogits^T (V, r) @ xr (r, C); none for a frozen head
  if (a.dw == nullptr) return;
  gemm.run(linear_dw_spec(r, a.C, a.V, in), b.dlogits, b.xr, a.dw, nullptr, stream);
}
}  // namespace

void cross_entropy(const CrossEntropyArgs& a, bool bf16, LtGemm& gemm, CrossEntropyScratch& sc,
                   cudaStream_t stream) {
  KILN_CHECK(a.w.dtype == DType::F32 || (bf16 && a.w.dtype == DType::BF16),
             "cross_entropy: {} weight on the {} CUDA backend", dtype_name(a.w.dtype),
             bf16 ? "bf16" : "fp32");
  if (a.dx != nullptr && a.N > 0) {
    KILN_CUDA_CHECK(cudaMemsetAsync(a.dx, 0, sizeof(float) * a.N * a.C, stream));
  }
  KILN_CHECK(a.targeted >= 0 && a.targeted <= a.N, "cross_entropy: {} targeted rows of {}",
             a.targeted, a.N);
  const CePlan plan = ce_plan(a.targeted, a.V);  // only rows with a target are computed
  if (plan.chunks == 0) return;
  const CeBuffers b = take_buffers(a, plan, bf16, sc, stream);
  ce_compact_rows(b.rows, a.targets, a.N, plan.padded_rows(), stream);
  for (int c = 0; c < plan.chunks; ++c) {
    run_chunk(a, b, c * plan.chunk_rows, plan.chunk_rows, bf16, gemm, stream);
  }
  ce_add_loss_sum(a.loss_sum, b.row_loss, plan.padded_rows(), stream);
}

}  // namespace kiln::cuda
