// Matrix products through OpenBLAS (sgemm); never a hand-rolled GEMM.
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "kiln/kernels/cpu/cpu_backend.h"

namespace kiln {

void CpuBackend::matmul_forward(float* out, const float* x, const float* w, const float* b, int N,
                                int IC, int OC) const {
  if (N == 1) {
    // One row (a decoding step): sgemv streams w once, where OpenBLAS 0.3.21's sgemm packs all
    // of w first (the LM head of a decoded token, 32000 x 384: 4 ms instead of 15).
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
  // out (N, OC) = x (N, IC) @ w^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, x, IC, w, IC, beta, out,
              OC);
}

void CpuBackend::matmul_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                                 const float* w, int N, int IC, int OC, bool accumulate) const {
  if (dx != nullptr) {
    // dx (N, IC) = dout (N, OC) @ w (OC, IC)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, w, IC,
                accumulate ? 1.0f : 0.0f, dx, IC);
  }
  // dw (OC, IC) += dout^T (OC, N) @ x (N, IC)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, x, IC, 1.0f, dw,
              IC);
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
