// Flash attention backward on tensor cores (kernels/cuda/attention_ops.h), head_dim 64 and 128,
// FlashAttention-2 style and deterministic (no atomics). The probabilities are recomputed from
// q, k and the forward's lse: P = exp(scale q.k - lse), dS = P (dy.v - D) with
// D = rowsum(dy * y) (attention_row_dot, into scratch), and
//   dQ = scale dS K      (flash_dq_kernel: parallel over query blocks, looping over key blocks)
//   dK = scale dS^T Q, dV = P^T dy  (flash_dkdv_kernel: parallel over key blocks of each kv
//                                    head, looping over query heads and query blocks)
// Under grouped-query heads a dK/dV block loops over the query heads of its kv head's group (K and
// V staged once), or over a part of them (dkdv_head_splits: enough blocks for the GPU), the parts
// then written into scratch and added in a fixed order (attention_sum_parts). Every product
// is mma.m16n8k16 with bf16 operands staged in shared memory (rounded from fp32 as they are
// staged; P and dS rounded from their fp32 accumulators) and fp32 accumulation. Fragment
// layouts: attention_fragments.h.
#include <climits>
#include <cmath>

#include "kiln/kernels/cuda/attention_internal.h"
#include "kiln/kernels/cuda/attention_mma.cuh"
#include "kiln/kernels/cuda/attention_ops.h"
#include "kiln/kernels/cuda/attention_tiling.h"
#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/launch.cuh"

namespace kiln::cuda {

namespace {

using mma::kPad;
using bf16 = __nv_bfloat16;

constexpr int kBwdThreads = 128;  // 4 warps, 16 rows (dQ: query rows; dK/dV: key rows) each
constexpr int kBwdBlock = 64;     // rows a block owns (dQ: queries, dK/dV: keys)
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kBwdBlock == kDkdvKeys, "dkdv_head_splits counts blocks of kBwdBlock keys");

// Query rows per inner step of the dK/dV pass: its registers hold dK and dV (16 x D each per
// warp) besides S^T and dP^T (16 x rows), so D = 128 takes 32 rows a step.
template <int D>
constexpr int dkdv_query_rows() {
  return D == 128 ? 32 : 64;
}

struct FlashBackward {
  float* dq;
  float *dk_out, *dv_out;  // (B, T, KV * splits, D): dk and dv themselves when splits == 1
  const float *dy, *q, *k, *v, *lse, *di;
  const int32_t* doc_start;
  int T, H, KV;
  int splits;  // dK/dV parts per kv head: dkdv_head_splits
  float scale, scale_log2;
};

// Pointers and strides of one (batch, query head) pair.
struct HeadPtrs {
  long long ldq, ldk, qoff, koff;  // row strides and offsets of the (b, h) and (b, g) heads
  long long stat;                  // offset of (b, h) in the (B, H, T) lse and D
};

__device__ HeadPtrs head_ptrs(const FlashBackward& p, int b, int h, int D) {
  const int g = h / (p.H / p.KV);
  const long long ldq = static_cast<long long>(p.H) * D, ldk = static_cast<long long>(p.KV) * D;
  return {ldq, ldk, static_cast<long long>(b) * p.T * ldq + static_cast<long long>(h) * D,
          static_cast<long long>(b) * p.T * ldk + static_cast<long long>(g) * D,
          (static_cast<long long>(b) * p.H + h) * p.T};
}

template <int N, int W>
__device__ void zero(float (&x)[N][W]) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < W; ++e) x[n][e] = 0.0f;
  }
}

// acc (16 x 8 N) += A B^T for this warp's 16 rows of a ([row][d], rows row0..) against the N * 8
// rows of b ([n][d]): the scores of one side against the other (S, dP, S^T, dP^T).
template <int D, int N>
__device__ void rows_dot_rows(float (&acc)[N][4], const bf16* a, int row0, const bf16* b,
                              int lane) {
  constexpr int kLd = D + kPad;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t af[4];
    mma::load_a<kLd>(af, a, row0, kk * 16, lane);
#pragma unroll
    for (int nb = 0; nb < N / 2; ++nb) {
      uint32_t bf[4];
      mma::load_b_nk<kLd>(bf, b, nb * 16, kk * 16, lane);
      mma::mma_bf16(acc[2 * nb], af, bf[0], bf[1]);
      mma::mma_bf16(acc[2 * nb + 1], af, bf[2], bf[3]);
    }
  }
}

// acc (16 x D) += W X for W the warp's (16 x 8 N) accumulators (P, dS or their transposes,
// rounded to bf16) and X the tile ([n][d], N * 8 rows) they weight.
template <int D, int N>
__device__ void weights_times_rows(float (&acc)[D / 8][4], const float (&w)[N][4], const bf16* x,
                                   int lane) {
  constexpr int kLd = D + kPad;
#pragma unroll
  for (int kk = 0; kk < N / 2; ++kk) {
    uint32_t wa[4];
    mma::acc_to_a(wa, w[2 * kk], w[2 * kk + 1]);
#pragma unroll
    for (int dn = 0; dn < D / 16; ++dn) {
      uint32_t xf[4];
      mma::load_b_kn<kLd>(xf, x, kk * 16, dn * 16, lane);
      mma::mma_bf16(acc[2 * dn], wa, xf[0], xf[1]);
      mma::mma_bf16(acc[2 * dn + 1], wa, xf[2], xf[3]);
    }
  }
}

// out rows (16 per warp, row stride ld) = a * acc, for rows below T.
template <int D>
__device__ void store_rows(float* out, long long ld, const float (&acc)[D / 8][4], float a,
                           const int (&row)[2], int T, int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= T) continue;
    float* o = out + row[r] * ld;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<float2*>(o + n * 8 + mma::acc_col(lane, 0)) =
          make_float2(a * acc[n][2 * r], a * acc[n][2 * r + 1]);
    }
  }
}

template <int D>
constexpr size_t dq_smem_bytes() {
  return sizeof(bf16) * 4 * kBwdBlock * (D + kPad);  // Q, dy, K, V tiles
}

// dQ. Grid (ceil(T / 64), H, B), block 128: query rows [i0, i0 + 64) of head h (last rows
// first), warp w rows i0 + 16 w + [0, 16) (accumulator rows lane / 4 and lane / 4 + 8). Q and dy
// staged once; K and V 64 keys at a time over key_blocks_for_queries. Per key block and warp:
// S, dP (16 x 64) = Q K^T, dy V^T; dS = P (dP - D); dQ (16 x D) += dS K. Shared memory: four
// 64 x (D + 8) bf16 tiles (68 KiB at D = 128, dynamic). Registers: dQ D / 2, S and dP 32 each.
template <int D>
__global__ void __launch_bounds__(kBwdThreads, 1) flash_dq_kernel(FlashBackward p) {
  constexpr int kLd = D + kPad, kNs = kBwdBlock / 8;
  KILN_EXTERN_SHARED(smem);
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* dys = qs + kBwdBlock * kLd;
  bf16* ks = dys + kBwdBlock * kLd;
  bf16* vs = ks + kBwdBlock * kLd;
  __shared__ int min_slot;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, T = p.T;
  const int b = blockIdx.z, h = blockIdx.y;
  const int i0 = (gridDim.x - 1 - blockIdx.x) * kBwdBlock;
  const HeadPtrs hp = head_ptrs(p, b, h, D);
  const int32_t* ds = p.doc_start ? p.doc_start + static_cast<long long>(b) * T : nullptr;
  int row[2], row_ds[2];
  float lse2[2], di[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row[r] = i0 + warp * 16 + frag::acc_row(lane, 2 * r);
    const bool ok = row[r] < T;
    row_ds[r] = ds != nullptr && ok ? ds[row[r]] : 0;
    lse2[r] = ok ? p.lse[hp.stat + row[r]] * kLog2e : 0.0f;
    di[r] = ok ? p.di[hp.stat + row[r]] : 0.0f;
  }
  const int lo = mma::block_min_doc_start(&min_slot, ds, i0, kBwdBlock, T);
  mma::stage_bf16<kBwdBlock, D, kBwdThreads>(qs, p.q + hp.qoff, hp.ldq, i0, T);
  mma::stage_bf16<kBwdBlock, D, kBwdThreads>(dys, p.dy + hp.qoff, hp.ldq, i0, T);
  float dq[D / 8][4];
  zero(dq);
  const BlockRange keys = key_blocks_for_queries(i0, kBwdBlock, lo, kBwdBlock, T);
  for (int kb = keys.begin; kb < keys.end; ++kb) {
    const int j0 = kb * kBwdBlock;
    mma::stage_bf16<kBwdBlock, D, kBwdThreads>(ks, p.k + hp.koff, hp.ldk, j0, T);
    mma::stage_bf16<kBwdBlock, D, kBwdThreads>(vs, p.v + hp.koff, hp.ldk, j0, T);
    __syncthreads();
    float s[kNs][4], dp[kNs][4];
    zero(s);
    zero(dp);
    rows_dot_rows<D, kNs>(s, qs, warp * 16, ks, lane);
    rows_dot_rows<D, kNs>(dp, dys, warp * 16, vs, lane);
#pragma unroll
    for (int n = 0; n < kNs; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, j = j0 + n * 8 + mma::acc_col(lane, e);
        const float pr =
            attends(row[r], j, row_ds[r], T) ? exp2f(s[n][e] * p.scale_log2 - lse2[r]) : 0.0f;
        s[n][e] = pr * (dp[n][e] - di[r]);  // dS
      }
    }
    weights_times_rows<D, kNs>(dq, s, ks, lane);
    __syncthreads();  // K and V are restaged next
  }
  store_rows<D>(p.dq + hp.qoff, hp.ldq, dq, p.scale, row, T, lane);
}

template <int D>
constexpr size_t dkdv_smem_bytes() {
  return sizeof(bf16) * 2 * (kBwdBlock + dkdv_query_rows<D>()) * (D + kPad);  // K, V, Q, dy
}

// dK, dV of kv head g from part sp of its group's query heads (H / KV / splits heads, in order).
// Grid (ceil(T / 64), KV * splits, B), blockIdx.y = g * splits + sp, block 128: keys
// [j0, j0 + 64) (first keys, the most work, first), warp w keys j0 + 16 w + [0, 16) (accumulator
// rows). K and V staged once; per query head Q and dy R = dkdv_query_rows<D>() rows at a time with
// their lse, D and doc starts, over the query blocks from j0 on (query_blocks_for_keys) that can
// see these keys (queries_see_keys). Per query block and warp: S^T, dP^T (16 x R) = K Q^T, V dy^T;
// P^T, dS^T = P^T (dP^T - D); dV (16 x D) += P^T dy, dK += dS^T Q. Shared memory: K, V 64 x (D +
// 8), Q, dy R x (D + 8) bf16 (51 KiB at D = 128, dynamic). Registers: dK, dV D / 2 each, S^T, dP^T
// R / 2 each.
template <int D>
__global__ void __launch_bounds__(kBwdThreads, 1) flash_dkdv_kernel(FlashBackward p) {
  constexpr int kLd = D + kPad, kR = dkdv_query_rows<D>(), kNq = kR / 8;
  KILN_EXTERN_SHARED(smem);
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + kBwdBlock * kLd;
  bf16* qs = vs + kBwdBlock * kLd;
  bf16* dys = qs + kR * kLd;
  __shared__ float lse2s[kR], dis[kR];
  __shared__ int dss[kR];
  __shared__ int min_slot;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, T = p.T;
  const int b = blockIdx.z, j0 = blockIdx.x * kBwdBlock;
  const int per = p.H / p.KV / p.splits;  // query heads per block
  const int g = blockIdx.y / p.splits, h0 = g * (p.H / p.KV) + blockIdx.y % p.splits * per;
  const int32_t* ds = p.doc_start ? p.doc_start + static_cast<long long>(b) * T : nullptr;
  int key[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) key[r] = j0 + warp * 16 + frag::acc_row(lane, 2 * r);
  const HeadPtrs kvp = head_ptrs(p, b, h0, D);  // its koff is kv head g's
  mma::stage_bf16<kBwdBlock, D, kBwdThreads>(ks, p.k + kvp.koff, kvp.ldk, j0, T);
  mma::stage_bf16<kBwdBlock, D, kBwdThreads>(vs, p.v + kvp.koff, kvp.ldk, j0, T);
  float dk[D / 8][4], dv[D / 8][4];
  zero(dk);
  zero(dv);
  const BlockRange queries = query_blocks_for_keys(j0, kR, T);
  for (int h = h0; h < h0 + per; ++h) {
    const HeadPtrs hp = head_ptrs(p, b, h, D);
    for (int qb = queries.begin; qb < queries.end; ++qb) {
      const int i0 = qb * kR;
      const int lo = mma::block_min_doc_start(&min_slot, ds, i0, kR, T);
      if (!queries_see_keys(i0, kR, lo, j0, kBwdBlock, T)) continue;  // the same in every thread
      mma::stage_bf16<kR, D, kBwdThreads>(qs, p.q + hp.qoff, hp.ldq, i0, T);
      mma::stage_bf16<kR, D, kBwdThreads>(dys, p.dy + hp.qoff, hp.ldq, i0, T);
      if (threadIdx.x < kR) {
        const int i = i0 + threadIdx.x;
        const bool ok = i < T;
        lse2s[threadIdx.x] = ok ? p.lse[hp.stat + i] * kLog2e : 0.0f;
        dis[threadIdx.x] = ok ? p.di[hp.stat + i] : 0.0f;
        dss[threadIdx.x] = ok ? (ds != nullptr ? ds[i] : 0) : INT_MAX;
      }
      __syncthreads();
      float st[kNq][4], dpt[kNq][4];
      zero(st);
      zero(dpt);
      rows_dot_rows<D, kNq>(st, ks, warp * 16, qs, lane);
      rows_dot_rows<D, kNq>(dpt, vs, warp * 16, dys, lane);
#pragma unroll
      for (int n = 0; n < kNq; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e / 2, c = n * 8 + mma::acc_col(lane, e);
          const float pr =
              attends(i0 + c, key[r], dss[c], T) ? exp2f(st[n][e] * p.scale_log2 - lse2s[c]) : 0.0f;
          st[n][e] = pr;                          // P^T
          dpt[n][e] = pr * (dpt[n][e] - dis[c]);  // dS^T
        }
      }
      weights_times_rows<D, kNq>(dv, st, dys, lane);
      weights_times_rows<D, kNq>(dk, dpt, qs, lane);
      __syncthreads();  // Q, dy and their row values are restaged next
    }
  }
  const long long ld_out = static_cast<long long>(p.KV) * p.splits * D;
  const long long out =
      static_cast<long long>(b) * T * ld_out + static_cast<long long>(blockIdx.y) * D;
  store_rows<D>(p.dk_out + out, ld_out, dk, p.scale, key, T, lane);
  store_rows<D>(p.dv_out + out, ld_out, dv, 1.0f, key, T, lane);
}

template <int D>
void launch_backward(const FlashBackward& p, const AttnShape& s, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(blocks_of(s.T, kBwdBlock)), static_cast<unsigned>(s.H),
                  static_cast<unsigned>(s.B));
  const dim3 kv_grid(grid.x, static_cast<unsigned>(s.KV * p.splits), grid.z);
  constexpr size_t dq_bytes = dq_smem_bytes<D>(), dkdv_bytes = dkdv_smem_bytes<D>();
  KILN_CUDA_CHECK(cudaFuncSetAttribute(flash_dq_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, dq_bytes));
  KILN_CUDA_CHECK(cudaFuncSetAttribute(flash_dkdv_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, dkdv_bytes));
  KILN_LAUNCH(grid, kBwdThreads, dq_bytes, stream, flash_dq_kernel<D>)(p);
  KILN_CUDA_CHECK(cudaGetLastError());
  KILN_LAUNCH(kv_grid, kBwdThreads, dkdv_bytes, stream, flash_dkdv_kernel<D>)(p);
  KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void flash_attention_backward(float* dq, float* dk, float* dv, const float* dy, const float* q,
                              const float* k, const float* v, const float* y, const float* lse,
                              const int32_t* doc_start, const AttnShape& s, void* scratch,
                              cudaStream_t stream) {
  check_flash_shape(s, {dq, dk, dv, dy, q, k, v, y});
  if (s.B == 0 || s.T == 0 || s.H == 0) return;
  const BackwardScratch sc = backward_scratch(scratch, s);
  attention_row_dot(sc.di, dy, y, s, stream);
  const int splits = dkdv_head_splits(s.B, s.T, s.H, s.KV);
  const bool parts = splits > 1;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  const FlashBackward p{dq,
                        parts ? sc.dk_part : dk,
                        parts ? sc.dv_part : dv,
                        dy,
                        q,
                        k,
                        v,
                        lse,
                        sc.di,
                        doc_start,
                        s.T,
                        s.H,
                        s.KV,
                        splits,
                        scale,
                        scale * kLog2e};
  if (s.D == 64) {
    launch_backward<64>(p, s, stream);
  } else {
    launch_backward<128>(p, s, stream);
  }
  if (parts) {
    attention_sum_parts(dk, sc.dk_part, s, splits, stream);
    attention_sum_parts(dv, sc.dv_part, s, splits, stream);
  }
}

}  // namespace kiln::cuda
