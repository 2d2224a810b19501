// Causal grouped-query attention on CPU, tiled over keys (flash-attention style): one
// (batch, head) pair per task; query rows are taken a tile of R at a time and keys in blocks of
// kBk, and each row keeps an online softmax (running max m and sum l) while the tile's outputs
// accumulate in registers, so no (T, T) score matrix exists anywhere: a task holds one head's K^T
// (D, T) and a tile's (R, kBk) scores. Backward recomputes each block's probabilities from q, k
// and the saved log-sum-exp (B*H*T floats kept, not B*H*T*T). Per-thread scratch grows on the
// first call and is reused, so a steady-state step allocates nothing here.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/base/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/scratch_sizes.h"
#include "kiln/kernels/cpu/vec_math.h"

namespace kiln {

namespace {

constexpr int kBk = 64;  // keys per block: a block of K^T (D x 64) stays in L1

// One thread's piece of the team scratch (cpu_attention_scratch_bytes): kt, vt (D, ld) the task's
// K and V heads transposed, zero-padded; di (T) the backward's rowsum(dY * Y).
struct ThreadScratch {
  float *kt, *vt, *di;
};

ThreadScratch thread_scratch(float* team, int D, int ld, int T) {
  const size_t kv = static_cast<size_t>(D) * ld;
  float* mine = team + static_cast<size_t>(omp_get_thread_num()) * (2 * kv + T);
  return {mine, mine + kv, mine + 2 * kv};
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

// Query rows are taken R at a time (a tile) against each key block, so a K^T or V row loaded once
// serves R rows and the tile's outputs stay in registers: R = 8, 4, 2 for head_dim 16 / 32, 64,
// 128. Head dims other than 16, 32, 64 and 128 take a generic path (runtime D, one row a tile).
constexpr int kMaxD = 256;  // the generic path's bound on head_dim

constexpr int rows_for(int D) { return D == 0 ? 1 : (D <= 16 ? 8 : (D <= 64 ? 4 : 2)); }

// s[r][c] = a * dot(q_r, K[j0 + c]) for R rows (q_r = q + r * ldq) and the kBk keys of a block
// (ktb = kt + j0, stride ld).
template <int R, int D>
inline void tile_scores(float (*__restrict s)[kBk], const float* __restrict q, int ldq,
                        const float* __restrict ktb, int ld, int dn, float a) {
  const int Dn = D ? D : dn;
  for (int c0 = 0; c0 < kBk; c0 += 16) {
    float acc[R][16] = {};
    for (int d = 0; d < Dn; ++d) {
      const float* kr = ktb + static_cast<size_t>(d) * ld + c0;
      for (int r = 0; r < R; ++r) {
        const float qv = q[static_cast<size_t>(r) * ldq + d];
#pragma omp simd
        for (int c = 0; c < 16; ++c) acc[r][c] += qv * kr[c];
      }
    }
    for (int r = 0; r < R; ++r) {
#pragma omp simd
      for (int c = 0; c < 16; ++c) s[r][c0 + c] = a * acc[r][c];
    }
  }
}

// acc[r] (D) += sum over keys c in [c0, c1) of p[r][c] * X[c] (X rows of stride ldx).
template <int R, int D>
inline void tile_accumulate(float (*__restrict acc)[D ? D : kMaxD],
                            const float (*__restrict p)[kBk], const float* __restrict X, int ldx,
                            int c0, int c1, int dn) {
  const int Dn = D ? D : dn;
  for (int c = c0; c < c1; ++c) {
    const float* xr = X + static_cast<size_t>(c) * ldx;
    for (int r = 0; r < R; ++r) {
      const float pr = p[r][c];
#pragma omp simd
      for (int d = 0; d < Dn; ++d) acc[r][d] += pr * xr[d];
    }
  }
}

// Y[i] += sum over the tile's rows r of p[r][c] * X_r for keys c in [c0, c1): dV and dK rows
// (stride D) gathering R query rows (X_r = X + r * ldx).
template <int R, int D>
inline void tile_scatter(float* __restrict Y, const float (*__restrict p)[kBk],
                         const float* __restrict X, int ldx, int c0, int c1, int dn) {
  const int Dn = D ? D : dn;
  for (int c = c0; c < c1; ++c) {
    float* yr = Y + static_cast<size_t>(c) * Dn;
    for (int r = 0; r < R; ++r) {
      const float pr = p[r][c];
      const float* xr = X + static_cast<size_t>(r) * ldx;
#pragma omp simd
      for (int d = 0; d < Dn; ++d) yr[d] += pr * xr[d];
    }
  }
}

// Valid keys of row i within block [j0, j0 + nk): [lo, hi) relative to j0 (empty when hi <= lo).
inline void row_range(const int32_t* ds, int i, int j0, int nk, int* lo, int* hi) {
  *lo = std::max((ds ? ds[i] : 0) - j0, 0);
  *hi = std::min(i - j0 + 1, nk);
}

// The first key block any row of [i0, i0 + R) attends to.
inline int first_block(const int32_t* ds, int i0, int R) {
  if (ds == nullptr) return 0;
  int lo = ds[i0];
  for (int r = 1; r < R; ++r) lo = std::min(lo, ds[i0 + r]);
  return lo / kBk * kBk;
}

// One (batch, head) task's geometry: its row of document starts, sequence length, row strides
// of Q and K/V, K^T's padded stride, head_dim and the 1/sqrt(D) scale.
struct HeadDims {
  const int32_t* ds;
  int T, ldq, ldk, ld, D;
  float sc;
};

struct HeadFwd : HeadDims {
  const float *Q, *V, *kt;
  float *Y, *L;
};

// Rows [i0, i0 + R) of one head: online softmax over the key blocks, output in registers.
template <int R, int D>
void forward_tile(const HeadFwd& h, int i0) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int Dn = D ? D : h.D;
  alignas(64) float acc[R][D ? D : kMaxD];
  alignas(64) float s[R][kBk];
  float m[R], l[R];
  for (int r = 0; r < R; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f;
    for (int d = 0; d < Dn; ++d) acc[r][d] = 0.0f;
  }
  const int last = i0 + R - 1;
  for (int j0 = first_block(h.ds, i0, R); j0 <= last; j0 += kBk) {
    const int nk = std::min(kBk, h.T - j0);
    tile_scores<R, D>(s, h.Q + static_cast<size_t>(i0) * h.ldq, h.ldq, h.kt + j0, h.ld, Dn, h.sc);
    int cmin = kBk, cmax = 0;
    for (int r = 0; r < R; ++r) {
      int lo, hi;
      row_range(h.ds, i0 + r, j0, nk, &lo, &hi);
      float* sr = s[r];
      if (hi <= lo) {
        std::fill(sr, sr + kBk, 0.0f);
        continue;
      }
      cmin = std::min(cmin, lo);
      cmax = std::max(cmax, hi);
      float mx = kNegInf;
      for (int c = lo; c < hi; ++c) mx = std::max(mx, sr[c]);
      const float mnew = std::max(m[r], mx);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int c = 0; c < kBk; ++c) {
        const float e = (c >= lo && c < hi) ? vec::exp(sr[c] - mnew) : 0.0f;
        sr[c] = e;
        sum += e;
      }
      if (mnew != m[r]) {
        const float alpha = vec::exp(m[r] - mnew);  // 0 on the row's first block
        l[r] *= alpha;
#pragma omp simd
        for (int d = 0; d < Dn; ++d) acc[r][d] *= alpha;
        m[r] = mnew;
      }
      l[r] += sum;
    }
    if (cmax > cmin) {
      tile_accumulate<R, D>(acc, s, h.V + static_cast<size_t>(j0) * h.ldk, h.ldk, cmin, cmax, Dn);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* yr = h.Y + static_cast<size_t>(i0 + r) * h.ldq;
    const float inv = 1.0f / l[r];
#pragma omp simd
    for (int d = 0; d < Dn; ++d) yr[d] = acc[r][d] * inv;
    h.L[i0 + r] = m[r] + std::log(l[r]);
  }
}

template <int D>
void forward_head(const HeadFwd& h) {
  constexpr int R = rows_for(D);
  int i0 = 0;
  for (; i0 + R <= h.T; i0 += R) forward_tile<R, D>(h, i0);
  for (; i0 < h.T; ++i0) forward_tile<1, D>(h, i0);
}

struct HeadBwd : HeadDims {
  const float *Q, *K, *dY, *L, *di, *kt, *vt;
  float *dQ, *dK, *dV;
};

// Rows [i0, i0 + R) of one head: p and dS per key block from q, k, v and the saved log-sum-exp;
// dQ accumulates in registers, dK and dV rows (per query head) in memory.
template <int R, int D>
void backward_tile(const HeadBwd& h, int i0) {
  const int Dn = D ? D : h.D;
  alignas(64) float dq[R][D ? D : kMaxD];
  alignas(64) float p[R][kBk], dp[R][kBk];
  for (int r = 0; r < R; ++r) {
    for (int d = 0; d < Dn; ++d) dq[r][d] = 0.0f;
  }
  const float* Qt = h.Q + static_cast<size_t>(i0) * h.ldq;
  const float* dYt = h.dY + static_cast<size_t>(i0) * h.ldq;
  const int last = i0 + R - 1;
  for (int j0 = first_block(h.ds, i0, R); j0 <= last; j0 += kBk) {
    const int nk = std::min(kBk, h.T - j0);
    tile_scores<R, D>(p, Qt, h.ldq, h.kt + j0, h.ld, Dn, h.sc);
    tile_scores<R, D>(dp, dYt, h.ldq, h.vt + j0, h.ld, Dn, 1.0f);
    int cmin = kBk, cmax = 0;
    for (int r = 0; r < R; ++r) {
      int lo, hi;
      row_range(h.ds, i0 + r, j0, nk, &lo, &hi);
      if (hi > lo) {
        cmin = std::min(cmin, lo);
        cmax = std::max(cmax, hi);
      }
      const float li = h.L[i0 + r], dii = h.di[i0 + r], sc = h.sc;
      float *pr = p[r], *dpr = dp[r];
#pragma omp simd
      for (int c = 0; c < kBk; ++c) {
        const float e = (c >= lo && c < hi) ? vec::exp(pr[c] - li) : 0.0f;
        pr[c] = e;
        dpr[c] = sc * e * (dpr[c] - dii);  // d(score) before the 1/sqrt(D) scale
      }
    }
    if (cmax <= cmin) continue;
    tile_accumulate<R, D>(dq, dp, h.K + static_cast<size_t>(j0) * h.ldk, h.ldk, cmin, cmax, Dn);
    tile_scatter<R, D>(h.dV + static_cast<size_t>(j0) * Dn, p, dYt, h.ldq, cmin, cmax, Dn);
    tile_scatter<R, D>(h.dK + static_cast<size_t>(j0) * Dn, dp, Qt, h.ldq, cmin, cmax, Dn);
  }
  for (int r = 0; r < R; ++r) {
    float* o = h.dQ + static_cast<size_t>(i0 + r) * h.ldq;
#pragma omp simd
    for (int d = 0; d < Dn; ++d) o[d] = dq[r][d];
  }
}

template <int D>
void backward_head(const HeadBwd& h) {
  constexpr int R = rows_for(D);
  int i0 = 0;
  for (; i0 + R <= h.T; i0 += R) backward_tile<R, D>(h, i0);
  for (; i0 < h.T; ++i0) backward_tile<1, D>(h, i0);
}

template <typename Head>
void dispatch(const Head& h, void (*f16)(const Head&), void (*f32)(const Head&),
              void (*f64)(const Head&), void (*f128)(const Head&), void (*fany)(const Head&)) {
  switch (h.D) {
    case 16:
      return f16(h);
    case 32:
      return f32(h);
    case 64:
      return f64(h);
    case 128:
      return f128(h);
    default:
      return fany(h);
  }
}

}  // namespace

CpuAttentionScratchBytes cpu_attention_scratch_bytes(int B, int T, int H, int D, int threads,
                                                     bool backward) {
  CpuAttentionScratchBytes n;
  const size_t per_thread = 2 * static_cast<size_t>(D) * padded(T) + static_cast<size_t>(T);
  n.team = sizeof(float) * static_cast<size_t>(threads) * per_thread;
  if (backward) n.heads = sizeof(float) * 2 * static_cast<size_t>(B) * H * T * D;
  return n;
}

void CpuBackend::attention_forward(float* y, float* lse, const float* q, const float* k,
                                   const float* v, const int32_t* doc_start,
                                   const AttnShape& s) const {
  const int B = s.B, T = s.T, H = s.H, KV = s.KV, D = s.D;
  KILN_CHECK(D <= kMaxD, "attention: head_dim {} above {}", D, kMaxD);
  const int group = H / KV;
  const float sc = 1.0f / std::sqrt(static_cast<float>(D));
  const int ldq = H * D, ldk = KV * D, ld = padded(T);
  // The scratch is this backend's (ranks as threads in tests may share one backend).
  std::lock_guard lock(attn_mu_);
  const CpuAttentionScratchBytes n =
      cpu_attention_scratch_bytes(B, T, H, D, omp_get_max_threads(), false);
  float* team = attn_team_.as<float>(n.team);
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      const ThreadScratch st = thread_scratch(team, D, ld, T);
      const float* K = k + static_cast<size_t>(b) * T * ldk + g * D;
      transpose_head(st.kt, ld, K, ldk, T, D);
      HeadFwd hd;
      hd.Q = q + static_cast<size_t>(b) * T * ldq + h * D;
      hd.V = v + static_cast<size_t>(b) * T * ldk + g * D;
      hd.kt = st.kt;
      hd.Y = y + static_cast<size_t>(b) * T * ldq + h * D;
      hd.L = lse + (static_cast<size_t>(b) * H + h) * T;
      static_cast<HeadDims&>(hd) = {
          doc_start ? doc_start + static_cast<size_t>(b) * T : nullptr, T, ldq, ldk, ld, D, sc};
      dispatch<HeadFwd>(hd, forward_head<16>, forward_head<32>, forward_head<64>, forward_head<128>,
                        forward_head<0>);
    }
  }
}

void CpuBackend::attention_backward(float* dq, float* dk, float* dv, const float* dy,
                                    const float* q, const float* k, const float* v, const float* y,
                                    const float* lse, const int32_t* doc_start,
                                    const AttnShape& s) const {
  const int B = s.B, T = s.T, H = s.H, KV = s.KV, D = s.D;
  KILN_CHECK(D <= kMaxD, "attention: head_dim {} above {}", D, kMaxD);
  const int group = H / KV;
  const float sc = 1.0f / std::sqrt(static_cast<float>(D));
  const int ldq = H * D, ldk = KV * D, ld = padded(T);
  std::lock_guard lock(attn_mu_);
  const CpuAttentionScratchBytes n =
      cpu_attention_scratch_bytes(B, T, H, D, omp_get_max_threads(), true);
  float* team = attn_team_.as<float>(n.team);
  // Per-query-head dK and dV: (B, H, T, D) each, summed over each kv group afterwards so that
  // tasks never write the same memory.
  float* dkh_p = attn_heads_.as<float>(n.heads);
  float* dvh_p = dkh_p + static_cast<size_t>(B) * H * T * D;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      const size_t qoff = static_cast<size_t>(b) * T * ldq + h * D;
      const size_t koff = static_cast<size_t>(b) * T * ldk + g * D;
      const ThreadScratch st = thread_scratch(team, D, ld, T);
      transpose_head(st.kt, ld, k + koff, ldk, T, D);
      transpose_head(st.vt, ld, v + koff, ldk, T, D);
      HeadBwd hd;
      hd.Q = q + qoff;
      hd.K = k + koff;
      hd.dY = dy + qoff;
      hd.L = lse + (static_cast<size_t>(b) * H + h) * T;
      hd.kt = st.kt;
      hd.vt = st.vt;
      hd.dQ = dq + qoff;
      hd.dK = dkh_p + (static_cast<size_t>(b) * H + h) * T * D;
      hd.dV = dvh_p + (static_cast<size_t>(b) * H + h) * T * D;
      static_cast<HeadDims&>(hd) = {
          doc_start ? doc_start + static_cast<size_t>(b) * T : nullptr, T, ldq, ldk, ld, D, sc};
      std::fill(hd.dK, hd.dK + static_cast<size_t>(T) * D, 0.0f);
      std::fill(hd.dV, hd.dV + static_cast<size_t>(T) * D, 0.0f);
      // di = rowsum(dY * Y): the softmax backward's correction term
      float* di = st.di;
      const float* Y = y + qoff;
      for (int i = 0; i < T; ++i) {
        const float* a = hd.dY + static_cast<size_t>(i) * ldq;
        const float* c = Y + static_cast<size_t>(i) * ldq;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int d = 0; d < D; ++d) acc += a[d] * c[d];
        di[i] = acc;
      }
      hd.di = di;
      dispatch<HeadBwd>(hd, backward_head<16>, backward_head<32>, backward_head<64>,
                        backward_head<128>, backward_head<0>);
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
