// Linear layers through gemm() (fp32, or bf16 inputs with fp32 accumulation, see gemm.h); never a
// hand-rolled GEMM.
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/f32_view.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/scratch_sizes.h"

namespace kiln {

bool CpuBackend::supports(ComputeDType d) const {
  return d == ComputeDType::kFp32 || d == ComputeDType::kBf16;  // bf16 falls back where not native
}

DType cpu_activation_dtype(bool bf16) {
  return bf16 && gemm_bf16_native() ? DType::BF16 : DType::F32;
}

DType CpuBackend::activation_dtype() const { return cpu_activation_dtype(bf16_); }

namespace {
// A weight as a gemm_mixed() operand (row stride ld).
GemmOperand weight_operand(ConstDevPtr w, int ld) { return {w.data, w.dtype == DType::BF16, ld}; }
}  // namespace

void CpuBackend::check_matmul_inputs(ConstDevPtr x, ConstDevPtr w, const char* op) const {
  for (const ConstDevPtr& p : {x, w}) {
    KILN_CHECK(p.dtype == DType::F32 || (p.dtype == DType::BF16 && bf16_), "{}: {} input on {}", op,
               dtype_name(p.dtype), name());
  }
}

void CpuBackend::matmul_forward(float* out, ConstDevPtr x, ConstDevPtr w, ConstDevPtr b, int N,
                                int IC, int OC) const {
  check_matmul_inputs(x, w, "matmul_forward");
  const F32View bias(b.null() ? ConstDevPtr(static_cast<const float*>(nullptr)) : b, OC);
  if (N == 1 && !bf16_) {
    // One row (a decoding step): sgemv streams w once, where a GEMM packs all of w first (the LM
    // head of a decoded token, 32000 x 384: 4 ms instead of 15).
    if (!b.null()) std::copy(bias.get(), bias.get() + OC, out);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, IC, 1.0f, w.f32(), IC, x.f32(), 1,
                b.null() ? 0.0f : 1.0f, out, 1);
    return;
  }
  float beta = 0.0f;
  if (!b.null()) {
    const float* bv = bias.get();
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) std::copy(bv, bv + OC, out + static_cast<size_t>(n) * OC);
    beta = 1.0f;
  }
  const GemmPrecision p = bf16_ ? GemmPrecision::kBf16 : GemmPrecision::kFp32;
  // out (N, OC) = x (N, IC) @ w^T
  gemm_mixed(false, true, N, OC, IC, weight_operand(x, IC), weight_operand(w, IC), beta, out, OC,
             p);
}

void CpuBackend::matmul_backward(float* dx, float* dw, float* db, const float* dout, ConstDevPtr x,
                                 ConstDevPtr w, int N, int IC, int OC, bool accumulate) const {
  check_matmul_inputs(x, w, "matmul_backward");
  const GemmPrecision p = bf16_ ? GemmPrecision::kBf16 : GemmPrecision::kFp32;
  if (dx != nullptr) {
    // dx (N, IC) = dout (N, OC) @ w (OC, IC)
    gemm_mixed(false, false, N, IC, OC, {dout, false, OC}, weight_operand(w, IC),
               accumulate ? 1.0f : 0.0f, dx, IC, p);
  }
  // dw (OC, IC) += dout^T (OC, N) @ x (N, IC)
  if (dw != nullptr) {
    gemm_mixed(true, false, OC, IC, N, {dout, false, OC}, weight_operand(x, IC), 1.0f, dw, IC, p);
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
