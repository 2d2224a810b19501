// Causal grouped-query attention on CPU, tiled over keys (flash-attention style): one
// (batch, head) pair per task; keys are taken in blocks of kBk, and each query row keeps an online
// softmax (running max m and sum l) while its output accumulates in place, so no (T, T) score
// matrix exists anywhere: a task holds one head's K^T (D, T), a row of kBk scores and T floats of
// m and l. Backward recomputes each block's probabilities from q, k and the saved log-sum-exp
// (B*H*T floats kept, not B*H*T*T). Per-thread scratch grows on the first call and is reused, so
// a steady-state step allocates nothing here.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/vec_math.h"
#include "kiln/tensor/buffer.h"

namespace kiln {

namespace {

constexpr int kBk = 64;  // keys per block: a block of K^T (D x 64) stays in L1

struct Scratch {
  std::vector<float> kt, vt;  // (D, ld): the task's K and V heads transposed, zero-padded
  std::vector<float> m, l;    // (T) running max / sum (forward); di (T) in l (backward)
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Sizes every team thread's scratch before the tasks are handed out: with dynamic scheduling
// which thread runs which (batch, head) varies from call to call (a thread busy elsewhere may
// get none during warm-up), and that must never decide whether a later step allocates.
void reserve_scratch(int D, int ld, int T) {
#pragma omp parallel
  {
    Scratch& st = scratch();
    grow(st.kt, static_cast<size_t>(D) * ld);
    grow(st.vt, static_cast<size_t>(D) * ld);
    grow(st.m, T);
    grow(st.l, T);
  }
}

// Columns of K^T, padded to whole key blocks so the score loops run a fixed kBk.
int padded(int T) { return (T + kBk - 1) / kBk * kBk; }

// kt (D, ld) = K^T for rows [0, T) of one head (row stride ldk); columns [T, ld) zero.
void transpose_head(float* kt, int ld, const float* K, int ldk, int T, int D) {
  for (int j = 0; j < T; ++j) {
    const float* kr = K + static_cast<size_t>(j) * ldk;
    for (int d = 0; d < D; ++d) kt[static_cast<size_t>(d) * ld + j] = kr[d];
  }
  for (int d = 0; d < D; ++d) {
    std::fill(kt + static_cast<size_t>(d) * ld + T, kt + static_cast<size_t>(d) * ld + ld, 0.0f);
  }
}

// s[c] = a * dot(q, K[j0 + c]) for the kBk keys of a block; ktb = kt + j0 (stride ld).
inline void block_scores(float* __restrict s, const float* __restrict q,
                         const float* __restrict ktb, int ld, int D, float a) {
  float acc[kBk] = {};
  for (int d = 0; d < D; ++d) {
    const float qd = q[d] * a;
    const float* kr = ktb + static_cast<size_t>(d) * ld;
#pragma omp simd
    for (int c = 0; c < kBk; ++c) acc[c] += qd * kr[c];
  }
  for (int c = 0; c < kBk; ++c) s[c] = acc[c];
}

// y (D) += p * x (D)
inline void axpy(float* __restrict y, float p, const float* __restrict x, int D) {
#pragma omp simd
  for (int d = 0; d < D; ++d) y[d] += p * x[d];
}

// Valid keys of row i within block [j0, j0 + nk): [lo, hi) relative to j0 (empty when hi <= lo).
inline void row_range(const int32_t* ds, int i, int j0, int nk, int* lo, int* hi) {
  *lo = std::max((ds ? ds[i] : 0) - j0, 0);
  *hi = std::min(i - j0 + 1, nk);
}

}  // namespace

void CpuBackend::attention_forward(float* y, float* lse, const float* q, const float* k,
                                   const float* v, const int32_t* doc_start,
                                   const AttnShape& s) const {
  const int B = s.B, T = s.T, H = s.H, KV = s.KV, D = s.D;
  const int group = H / KV;
  const float sc = 1.0f / std::sqrt(static_cast<float>(D));
  const int ldq = H * D, ldk = KV * D, ld = padded(T);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  reserve_scratch(D, ld, T);
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
      Scratch& st = scratch();
      grow(st.kt, static_cast<size_t>(D) * ld);
      grow(st.m, T);
      grow(st.l, T);
      float *kt = st.kt.data(), *m = st.m.data(), *l = st.l.data();
      transpose_head(kt, ld, K, ldk, T, D);
      for (int i = 0; i < T; ++i) {
        m[i] = kNegInf;
        l[i] = 0.0f;
        std::fill(Y + static_cast<size_t>(i) * ldq, Y + static_cast<size_t>(i) * ldq + D, 0.0f);
      }
      alignas(64) float sb[kBk];
      for (int j0 = 0; j0 < T; j0 += kBk) {
        const int nk = std::min(kBk, T - j0);
        for (int i = j0; i < T; ++i) {
          int lo, hi;
          row_range(ds, i, j0, nk, &lo, &hi);
          if (hi <= lo) continue;
          block_scores(sb, Q + static_cast<size_t>(i) * ldq, kt + j0, ld, D, sc);
          float mx = kNegInf;
          for (int c = lo; c < hi; ++c) mx = std::max(mx, sb[c]);
          const float mnew = std::max(m[i], mx);
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int c = lo; c < hi; ++c) {
            sb[c] = vec::exp(sb[c] - mnew);
            sum += sb[c];
          }
          float* yr = Y + static_cast<size_t>(i) * ldq;
          if (mnew != m[i]) {
            const float alpha = vec::exp(m[i] - mnew);  // 0 on the row's first block
            l[i] *= alpha;
#pragma omp simd
            for (int d = 0; d < D; ++d) yr[d] *= alpha;
            m[i] = mnew;
          }
          l[i] += sum;
          for (int c = lo; c < hi; ++c) axpy(yr, sb[c], V + static_cast<size_t>(j0 + c) * ldk, D);
        }
      }
      for (int i = 0; i < T; ++i) {
        float* yr = Y + static_cast<size_t>(i) * ldq;
        const float inv = 1.0f / l[i];
#pragma omp simd
        for (int d = 0; d < D; ++d) yr[d] *= inv;
        L[i] = m[i] + std::log(l[i]);
      }
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
  const int ldq = H * D, ldk = KV * D, ld = padded(T);
  // Per-query-head dK and dV: (B, H, T, D), summed over each kv group afterwards so that tasks
  // never write the same memory. Held by the calling thread and reused across calls.
  thread_local Buffer<float> dkh, dvh;
  const size_t nh = static_cast<size_t>(B) * H * T * D;
  if (dkh.size() < nh) dkh.resize(nh);
  if (dvh.size() < nh) dvh.resize(nh);
  float *dkh_p = dkh.data(), *dvh_p = dvh.data();
  reserve_scratch(D, ld, T);
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
      float* dK = dkh_p + (static_cast<size_t>(b) * H + h) * T * D;
      float* dV = dvh_p + (static_cast<size_t>(b) * H + h) * T * D;
      const float* L = lse + (static_cast<size_t>(b) * H + h) * T;
      const int32_t* ds = doc_start ? doc_start + static_cast<size_t>(b) * T : nullptr;
      Scratch& st = scratch();
      grow(st.kt, static_cast<size_t>(D) * ld);
      grow(st.vt, static_cast<size_t>(D) * ld);
      grow(st.l, T);
      float *kt = st.kt.data(), *vt = st.vt.data(), *di = st.l.data();
      transpose_head(kt, ld, K, ldk, T, D);
      transpose_head(vt, ld, V, ldk, T, D);
      std::fill(dK, dK + static_cast<size_t>(T) * D, 0.0f);
      std::fill(dV, dV + static_cast<size_t>(T) * D, 0.0f);
      for (int i = 0; i < T; ++i) {
        // di = rowsum(dY * Y): the softmax backward's correction term
        const float* a = dY + static_cast<size_t>(i) * ldq;
        const float* c = Y + static_cast<size_t>(i) * ldq;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int d = 0; d < D; ++d) acc += a[d] * c[d];
        di[i] = acc;
        std::fill(dQ + static_cast<size_t>(i) * ldq, dQ + static_cast<size_t>(i) * ldq + D, 0.0f);
      }
      alignas(64) float p[kBk], dp[kBk];
      for (int j0 = 0; j0 < T; j0 += kBk) {
        const int nk = std::min(kBk, T - j0);
        for (int i = j0; i < T; ++i) {
          int lo, hi;
          row_range(ds, i, j0, nk, &lo, &hi);
          if (hi <= lo) continue;
          const float* qi = Q + static_cast<size_t>(i) * ldq;
          const float* dyi = dY + static_cast<size_t>(i) * ldq;
          float* dqi = dQ + static_cast<size_t>(i) * ldq;
          block_scores(p, qi, kt + j0, ld, D, sc);
          block_scores(dp, dyi, vt + j0, ld, D, 1.0f);
          const float li = L[i], dii = di[i];
#pragma omp simd
          for (int c = lo; c < hi; ++c) {
            p[c] = vec::exp(p[c] - li);
            dp[c] = sc * p[c] * (dp[c] - dii);  // d(score) before the 1/sqrt(D) scale
          }
          for (int c = lo; c < hi; ++c) {
            const size_t j = static_cast<size_t>(j0 + c);
            axpy(dV + j * D, p[c], dyi, D);
            axpy(dK + j * D, dp[c], qi, D);
            axpy(dqi, dp[c], K + j * ldk, D);
          }
        }
      }
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
#pragma omp simd
          for (int d = 0; d < D; ++d) {
            ok[d] += dkh_p[off + d];
            ov[d] += dvh_p[off + d];
          }
        }
      }
    }
  }
}

}  // namespace kiln
