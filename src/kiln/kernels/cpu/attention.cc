// Causal grouped-query attention on CPU, one (batch, head) pair per task. The (T, T) score
// matrix of a pair lives only in a per-thread scratch; backward recomputes the probabilities from
// the saved log-sum-exp instead of storing them (B*H*T floats kept, not B*H*T*T).
#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/tensor/buffer.h"

namespace kiln {

namespace {

// P (T, T): P[i][j] = exp(S[i][j] - lse[i]) for doc_start[i] <= j <= i, else 0. S is overwritten.
void probs_from_scores(float* S, const float* lse, const int32_t* ds, int T) {
  for (int i = 0; i < T; ++i) {
    float* row = S + static_cast<size_t>(i) * T;
    const int j0 = ds ? ds[i] : 0;
    for (int j = 0; j < j0; ++j) row[j] = 0.0f;
    for (int j = j0; j <= i; ++j) row[j] = std::exp(row[j] - lse[i]);
    for (int j = i + 1; j < T; ++j) row[j] = 0.0f;
  }
}

std::vector<float>& scratch(int slot, size_t n) {
  thread_local std::vector<float> buf[2];
  if (buf[slot].size() < n) buf[slot].resize(n);
  return buf[slot];
}

}  // namespace

void CpuBackend::attention_forward(float* y, float* lse, const float* q, const float* k,
                                   const float* v, const int32_t* doc_start,
                                   const AttnShape& s) const {
  const int B = s.B, T = s.T, H = s.H, KV = s.KV, D = s.D;
  const int group = H / KV;
  const float sc = 1.0f / std::sqrt(static_cast<float>(D));
  const int ldq = H * D, ldk = KV * D;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      const float* Q = q + static_cast<size_t>(b) * T * ldq + h * D;
      const float* K = k + static_cast<size_t>(b) * T * ldk + g * D;
      const float* V = v + static_cast<size_t>(b) * T * ldk + g * D;
      float* Y = y + static_cast<size_t>(b) * T * ldq + h * D;
      float* L = lse + (static_cast<size_t>(b) * H + h) * T;
      const int32_t* ds = doc_start ? doc_start + static_cast<size_t>(b) * T : nullptr;
      float* S = scratch(0, static_cast<size_t>(T) * T).data();
      // S (T, T) = sc * Q K^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D, sc, Q, ldq, K, ldk, 0.0f, S, T);
      for (int i = 0; i < T; ++i) {
        const float* row = S + static_cast<size_t>(i) * T;
        const int j0 = ds ? ds[i] : 0;
        float m = -std::numeric_limits<float>::infinity();
        for (int j = j0; j <= i; ++j) m = std::max(m, row[j]);
        double sum = 0;
        for (int j = j0; j <= i; ++j) sum += std::exp(static_cast<double>(row[j] - m));
        L[i] = m + static_cast<float>(std::log(sum));
      }
      probs_from_scores(S, L, ds, T);
      // Y (T, D) = P V
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, T, 1.0f, S, T, V, ldk, 0.0f, Y,
                  ldq);
    }
  }
}

void CpuBackend::attention_backward(float* dq, float* dk, float* dv, const float* dy,
                                    const float* q, const float* k, const float* v, const float* y,
                                    const float* lse, const int32_t* doc_start,
                                    const AttnShape& s) const {
  const int B = s.B, T = s.T, H = s.H, KV = s.KV, D = s.D;
  const int group = H / KV;
  const float sc = 1.0f / std::sqrt(static_cast<float>(D));
  const int ldq = H * D, ldk = KV * D;
  // Per-query-head dK and dV: (B, H, T, D), summed over each kv group afterwards so that tasks
  // never write the same memory.
  Buffer<float> dkh(static_cast<size_t>(B) * H * T * D), dvh(static_cast<size_t>(B) * H * T * D);
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      const size_t qoff = static_cast<size_t>(b) * T * ldq + h * D;
      const size_t koff = static_cast<size_t>(b) * T * ldk + g * D;
      const float* Q = q + qoff;
      const float* K = k + koff;
      const float* V = v + koff;
      const float* Y = y + qoff;
      const float* dY = dy + qoff;
      float* dQ = dq + qoff;
      float* dK = dkh.data() + (static_cast<size_t>(b) * H + h) * T * D;
      float* dV = dvh.data() + (static_cast<size_t>(b) * H + h) * T * D;
      const float* L = lse + (static_cast<size_t>(b) * H + h) * T;
      const int32_t* ds = doc_start ? doc_start + static_cast<size_t>(b) * T : nullptr;
      float* P = scratch(0, static_cast<size_t>(T) * T).data();
      float* dP = scratch(1, static_cast<size_t>(T) * T).data();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D, sc, Q, ldq, K, ldk, 0.0f, P, T);
      probs_from_scores(P, L, ds, T);
      // dP (T, T) = dY V^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D, 1.0f, dY, ldq, V, ldk, 0.0f, dP,
                  T);
      // dS = P * (dP - rowsum(dY * Y)), kept in dP
      for (int i = 0; i < T; ++i) {
        float di = 0;
        for (int d = 0; d < D; ++d) {
          di += dY[static_cast<size_t>(i) * ldq + d] * Y[static_cast<size_t>(i) * ldq + d];
        }
        float* prow = P + static_cast<size_t>(i) * T;
        float* drow = dP + static_cast<size_t>(i) * T;
        for (int j = 0; j < T; ++j) drow[j] = prow[j] * (drow[j] - di);
      }
      // dQ (T, D) = sc * dS K;  dK = sc * dS^T Q;  dV = P^T dY
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, T, sc, dP, T, K, ldk, 0.0f, dQ,
                  ldq);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, D, T, sc, dP, T, Q, ldq, 0.0f, dK, D);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, D, T, 1.0f, P, T, dY, ldq, 0.0f, dV,
                  D);
    }
  }
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int g = 0; g < KV; ++g) {
        float* ok = dk + (static_cast<size_t>(b) * T + t) * ldk + g * D;
        float* ov = dv + (static_cast<size_t>(b) * T + t) * ldk + g * D;
        for (int d = 0; d < D; ++d) {
          ok[d] = 0.0f;
          ov[d] = 0.0f;
        }
        for (int h = g * group; h < (g + 1) * group; ++h) {
          const size_t off = ((static_cast<size_t>(b) * H + h) * T + t) * D;
          for (int d = 0; d < D; ++d) {
            ok[d] += dkh[off + d];
            ov[d] += dvh[off + d];
          }
        }
      }
    }
  }
}

}  // namespace kiln
