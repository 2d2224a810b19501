// Attention of a few new tokens over a KV cache (incremental decoding). One task per (query head,
// block of new tokens): its scores (rows, keys) live in a per-thread scratch, and the softmax is
// computed as attention_forward computes it (max, double sum, log-sum-exp), so the rows agree
// with a full forward to float rounding.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/kernels/cpu/cpu_backend.h"

namespace kiln {

namespace {

// New tokens per task: bounds the scratch at kRows * (past + n_q) floats per thread during a
// long prefill, while a single decoded token is one task per head.
constexpr int kRows = 64;

float* decode_scratch(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace

void CpuBackend::attention_decode(float* y, const float* q, const float* k_cache,
                                  const float* v_cache, int n_q, int past, int H, int KV,
                                  int D) const {
  if (n_q <= 0) return;
  const int group = H / KV;
  const float sc = 1.0f / std::sqrt(static_cast<float>(D));
  const int ldq = H * D, ldk = KV * D;
  const int blocks = (n_q + kRows - 1) / kRows;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int h = 0; h < H; ++h) {
    for (int blk = 0; blk < blocks; ++blk) {
      const int i0 = blk * kRows, rows = std::min(kRows, n_q - i0);
      const int T = past + i0 + rows;  // keys the last row of the block sees
      const int g = h / group;
      const float* Q = q + static_cast<size_t>(i0) * ldq + h * D;
      const float* K = k_cache + g * D;
      const float* V = v_cache + g * D;
      float* Y = y + static_cast<size_t>(i0) * ldq + h * D;
      float* S = decode_scratch(static_cast<size_t>(rows) * T);
      // S (rows, T) = sc * Q K^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, T, D, sc, Q, ldq, K, ldk, 0.0f, S,
                  T);
      for (int r = 0; r < rows; ++r) {
        float* row = S + static_cast<size_t>(r) * T;
        const int last = past + i0 + r;  // causal: keys [0, last]
        float m = -std::numeric_limits<float>::infinity();
        for (int j = 0; j <= last; ++j) m = std::max(m, row[j]);
        double sum = 0;
        for (int j = 0; j <= last; ++j) sum += std::exp(static_cast<double>(row[j] - m));
        const float lse = m + static_cast<float>(std::log(sum));
        for (int j = 0; j <= last; ++j) row[j] = std::exp(row[j] - lse);
        for (int j = last + 1; j < T; ++j) row[j] = 0.0f;
      }
      // Y (rows, D) = P V
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, T, 1.0f, S, T, V, ldk, 0.0f,
                  Y, ldq);
    }
  }
}

}  // namespace kiln
