// Linear layers through gemm() (fp32, or bf16 inputs with fp32 accumulation, see gemm.h); never a
// hand-rolled GEMM.
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/gemm.h"

namespace kiln {

bool CpuBackend::supports(ComputeDType d) const {
  return d == ComputeDType::kFp32 || d == ComputeDType::kBf16;  // bf16 falls back where not native
}

DType CpuBackend::activation_dtype() const {
  return bf16_ && gemm_bf16_native() ? DType::BF16 : DType::F32;
}

void CpuBackend::matmul_forward(float* out, ConstAct xa, const float* w, const float* b, int N,
                                int IC, int OC) const {
  const bool x16 = xa.dtype == DType::BF16;
  KILN_CHECK(xa.dtype == DType::F32 || (x16 && bf16_), "matmul_forward: {} input on {}",
             dtype_name(xa.dtype), name());
  const float* x = static_cast<const float*>(xa.data);
  if (N == 1 && !bf16_) {
    // One row (a decoding step): sgemv streams w once, where a GEMM packs all of w first (the LM
    // head of a decoded token, 32000 x 384: 4 ms instead of 15).
    if (b != nullptr) std::copy(b, b + OC, out);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, IC, 1.0f, w, IC, x, 1, b != nullptr ? 1.0f : 0.0f,
                out, 1);
    return;
  }
  float beta = 0.0f;
  if (b != nullptr) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) std::copy(b, b + OC, out + static_cast<size_t>(n) * OC);
    beta = 1.0f;
  }
  const GemmPrecision p = bf16_ ? GemmPrecision::kBf16 : GemmPrecision::kFp32;
  // out (N, OC) = x (N, IC) @ w^T
  if (x16) {
    gemm_mixed(false, true, N, OC, IC, {xa.data, true, IC}, {w, false, IC}, beta, out, OC, p);
    return;
  }
  gemm(false, true, N, OC, IC, x, IC, w, IC, beta, out, OC, p);
}

void CpuBackend::matmul_backward(float* dx, float* dw, float* db, const float* dout, ConstAct xa,
                                 const float* w, int N, int IC, int OC, bool accumulate) const {
  const bool x16 = xa.dtype == DType::BF16;
  KILN_CHECK(xa.dtype == DType::F32 || (x16 && bf16_), "matmul_backward: {} input on {}",
             dtype_name(xa.dtype), name());
  const float* x = static_cast<const float*>(xa.data);
  const GemmPrecision p = bf16_ ? GemmPrecision::kBf16 : GemmPrecision::kFp32;
  if (dx != nullptr) {
    // dx (N, IC) = dout (N, OC) @ w (OC, IC)
    gemm(false, false, N, IC, OC, dout, OC, w, IC, accumulate ? 1.0f : 0.0f, dx, IC, p);
  }
  // dw (OC, IC) += dout^T (OC, N) @ x (N, IC)
  if (x16) {
    gemm_mixed(true, false, OC, IC, N, {dout, false, OC}, {xa.data, true, IC}, 1.0f, dw, IC, p);
  } else {
    gemm(true, false, OC, IC, N, dout, OC, x, IC, 1.0f, dw, IC, p);
  }
  if (db != nullptr) {
#pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; ++o) {
      float s = 0;
      for (int n = 0; n < N; ++n) s += dout[static_cast<size_t>(n) * OC + o];
      db[o] += s;
    }
  }
}

}  // namespace kiln
