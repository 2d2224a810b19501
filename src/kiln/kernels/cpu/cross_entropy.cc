// Fused LM head + cross-entropy: logits exist only for one chunk of rows at a time, and only for
// rows that have a target, so (tokens x vocab) is never materialised.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/tensor/buffer.h"

namespace kiln {

namespace {
constexpr size_t kChunkLogits = size_t{8} << 20;  // floats of logits per chunk (32 MiB)
}

double CpuBackend::cross_entropy(float* dx, float* dw, const float* x, const float* w,
                                 const int32_t* targets, int N, int C, int V, float scale) const {
  std::vector<int> rows;
  rows.reserve(N);
  for (int n = 0; n < N; ++n) {
    if (targets[n] != kIgnoreIndex) rows.push_back(n);
  }
  if (dx != nullptr) std::memset(dx, 0, sizeof(float) * N * C);
  if (rows.empty()) return 0.0;
  const int R = static_cast<int>(rows.size());
  const int chunk = static_cast<int>(std::clamp<size_t>(kChunkLogits / V, 1, R));
  Buffer<float> xc(static_cast<size_t>(chunk) * C), logits(static_cast<size_t>(chunk) * V);
  Buffer<float> dxc(dx ? static_cast<size_t>(chunk) * C : 0);
  std::vector<double> row_loss(chunk);
  double total = 0;
  for (int r0 = 0; r0 < R; r0 += chunk) {
    const int r = std::min(chunk, R - r0);
    for (int i = 0; i < r; ++i) {
      std::memcpy(xc.data() + static_cast<size_t>(i) * C, x + static_cast<size_t>(rows[r0 + i]) * C,
                  sizeof(float) * C);
    }
    // logits (r, V) = xc (r, C) @ w^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r, V, C, 1.0f, xc.data(), C, w, C, 0.0f,
                logits.data(), V);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < r; ++i) {
      float* lg = logits.data() + static_cast<size_t>(i) * V;
      const int t = targets[rows[r0 + i]];
      float m = lg[0];
      for (int j = 1; j < V; ++j) m = std::max(m, lg[j]);
      double sum = 0;
      for (int j = 0; j < V; ++j) sum += std::exp(static_cast<double>(lg[j] - m));
      const double lse = m + std::log(sum);
      row_loss[i] = lse - lg[t];
      if (dx != nullptr) {
        // dlogits = scale * (softmax - onehot(target))
        for (int j = 0; j < V; ++j) lg[j] = scale * static_cast<float>(std::exp(lg[j] - lse));
        lg[t] -= scale;
      }
    }
    for (int i = 0; i < r; ++i) total += row_loss[i];
    if (dx != nullptr) {
      // dxc (r, C) = dlogits (r, V) @ w (V, C);  dw (V, C) += dlogits^T @ xc
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, C, V, 1.0f, logits.data(), V, w, C,
                  0.0f, dxc.data(), C);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, C, r, 1.0f, logits.data(), V,
                  xc.data(), C, 1.0f, dw, C);
      for (int i = 0; i < r; ++i) {
        std::memcpy(dx + static_cast<size_t>(rows[r0 + i]) * C,
                    dxc.data() + static_cast<size_t>(i) * C, sizeof(float) * C);
      }
    }
  }
  return total;
}

}  // namespace kiln
