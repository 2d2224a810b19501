// CudaBackend's matrix products: linear layers and the LM head's cross-entropy, through cuBLASLt
// (gemm_lt.h). Under bf16 both inputs of every product are bf16 (F32 operands are rounded into
// scratch first, BF16 ones used as they are), accumulation and outputs fp32.
#include "kiln/base/error.h"
#include "kiln/kernels/cuda/column_sums.h"
#include "kiln/kernels/cuda/cross_entropy_kernels.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/linear_gemms.h"
#include "kiln/kernels/cuda/pointwise_ops.h"

namespace kiln {

const void* CudaBackend::gemm_operand(ConstDevPtr p, size_t n, cuda::DeviceScratch& scratch,
                                      const char* op) const {
  KILN_CHECK(p.dtype == DType::F32 || (p.dtype == DType::BF16 && bf16_), "{}: {} input on {}", op,
             dtype_name(p.dtype), name());
  if (cuda::reads_in_place(p.dtype, gemm_inputs())) return p.data;
  auto* rounded = scratch.as<uint16_t>(n);
  cuda::cast_f32_to_bf16(rounded, p.f32(), n, native());
  return rounded;
}

const float* CudaBackend::gemm_bias(ConstDevPtr b, int OC) const {
  if (b.null()) return nullptr;
  KILN_CHECK(b.dtype == DType::F32 || b.dtype == DType::BF16, "matmul_forward: {} bias",
             dtype_name(b.dtype));
  const size_t n = static_cast<size_t>(OC);
  if (b.dtype == DType::F32) {
    if (cuda::pointer_alignment(b.data) >= cuda::kLtBiasAlignment) return b.f32();
    // A bias sliced from a flat unit at an offset that is not a multiple of 4 floats: copied
    // into the (256-byte aligned) scratch, as cuBLASLt's bias epilogue needs 16 bytes.
    auto* aligned = bias_f32_.as<float>(n);
    copy_on_device(aligned, b.data, n * sizeof(float));
    return aligned;
  }
  auto* wide = bias_f32_.as<float>(n);
  cuda::cast_bf16_to_f32(wide, static_cast<const uint16_t*>(b.data), n, native());
  return wide;
}

void CudaBackend::matmul_forward(float* out, ConstDevPtr x, ConstDevPtr w, ConstDevPtr b, int N,
                                 int IC, int OC) const {
  if (N == 0) return;
  const size_t n_x = static_cast<size_t>(N) * IC;
  const size_t n_w = static_cast<size_t>(OC) * IC;
  const void* xa = gemm_operand(x, n_x, cast_a_, "matmul_forward");
  const void* wa = gemm_operand(w, n_w, cast_b_, "matmul_forward");
  const float* bias = gemm_bias(b, OC);
  // out (N, OC) = x (N, IC) @ w^T (w: (OC, IC)) + b
  gemm_.run(cuda::linear_forward_spec(N, IC, OC, gemm_inputs(), bias != nullptr), xa, wa, out, bias,
            native());
}

void CudaBackend::matmul_backward(float* dx, float* dw, float* db, const float* dout, ConstDevPtr x,
                                  ConstDevPtr w, int N, int IC, int OC, bool accumulate) const {
  if (N == 0) return;
  const void* douta = gemm_operand(dout, static_cast<size_t>(N) * OC, cast_a_, "matmul_backward");
  if (dx != nullptr) {
    const void* wa = gemm_operand(w, static_cast<size_t>(OC) * IC, cast_b_, "matmul_backward");
    // dx (N, IC) = dout (N, OC) @ w (OC, IC)
    gemm_.run(cuda::linear_dx_spec(N, IC, OC, gemm_inputs(), accumulate), douta, wa, dx, nullptr,
              native());
  }
  if (dw != nullptr) {
    const void* xa = gemm_operand(x, static_cast<size_t>(N) * IC, cast_c_, "matmul_backward");
    // dw (OC, IC) += dout^T (OC, N) @ x (N, IC)
    gemm_.run(cuda::linear_dw_spec(N, IC, OC, gemm_inputs()), douta, xa, dw, nullptr, native());
  }
  if (db != nullptr) cuda::add_column_sums(db, dout, N, OC, native());
}

void CudaBackend::cross_entropy(double* loss_sum, float* dx, float* dw, const float* x,
                                ConstDevPtr w, const int32_t* targets, int N, int targeted, int C,
                                int V, float scale) const {
  cuda::cross_entropy({loss_sum, dx, dw, x, w, targets, N, targeted, C, V, scale}, bf16_, gemm_,
                      ce_scratch_, native());
}

void CudaBackend::ce_part_max(float* row_max, const float* logits, int n, int m, int ld,
                              bool accumulate) const {
  cuda::ce_part_max(row_max, logits, n, m, ld, accumulate, native());
}

void CudaBackend::ce_part_sumexp(float* sums, const float* logits, const float* row_max,
                                 const int32_t* targets, int v0, int n, int m, int ld) const {
  cuda::ce_part_sumexp(sums, logits, row_max, targets, v0, n, m, ld, native());
}

void CudaBackend::ce_part_grad(float* logits, double* loss_sum, const float* row_max,
                               const float* sums, const int32_t* targets, int v0, int n, int m,
                               int ld, float scale, const float* row_weight, int loss_begin,
                               int loss_end) const {
  cuda::ce_part_grad(logits, loss_sum, row_max, sums, targets, v0, n, m, ld, scale, row_weight,
                     loss_begin, loss_end, native());
}

void CudaBackend::ce_part_row_loss(float* row_loss, const float* row_max, const float* sums,
                                   const int32_t* targets, int n) const {
  cuda::ce_part_row_loss(row_loss, row_max, sums, targets, n, native());
}

void CudaBackend::sequence_logps(double* seq, const float* row_loss, const int32_t* targets,
                                 const int32_t* bounds, int S) const {
  cuda::sequence_logps(seq, row_loss, targets, bounds, S, native());
}

void CudaBackend::preference_loss(float* row_weight, double* sums, const double* seq,
                                  const double* ref_seq, const int32_t* bounds, int S,
                                  const PreferenceTerms& terms, int sum_begin, int sum_end) const {
  cuda::preference_loss(row_weight, sums, seq, ref_seq, bounds, S, terms, sum_begin, sum_end,
                        native());
}

}  // namespace kiln
