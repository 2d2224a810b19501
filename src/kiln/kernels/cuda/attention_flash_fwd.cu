// Flash attention forward on tensor cores (kernels/cuda/attention_ops.h), head_dim 64 and 128.
//
// Grid (ceil(T / 64), H, B), block 128 threads = 4 warps; the block takes query rows
// [i0, i0 + 64) of head h (heaviest blocks, the last rows, first) and warp w rows
// i0 + 16 w + [0, 16). Q is rounded to bf16 into shared memory once and kept as A fragments in
// registers (D / 16 of them); K and V stream through shared memory 64 keys at a time (rounded to
// bf16 as they are staged), from the block's smallest doc start to its last row
// (key_blocks_for_queries), every element masked by attends(). Per 64-key block each warp
// computes S (16 x 64) = Q K^T with mma.m16n8k16, the online softmax in fp32 in the log2 domain
// (a row lives in the 4 lanes of a quad: lane / 4 is the row, lane % 4 the column pair), and
// O (16 x D) += P V with P repacked from the S accumulators. Shared memory: K and V tiles,
// 2 x 64 x (D + 8) bf16 (34 KiB at D = 128; Q is staged in the K tile before the loop).
// Registers per thread at D = 128: Q 32, O 64, S 32 (no cp.async double buffering: the fp32 to
// bf16 rounding passes through registers anyway, and a prefetched fp32 tile would not fit).
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

constexpr int kFwdRows = 64;  // query rows per block
constexpr int kFwdKeys = 64;  // keys per shared-memory block
constexpr int kFwdThreads = 128;
static_assert(kFwdRows == kFwdKeys, "Q is staged in the K tile");

struct FlashForward {
  float* y;
  float* lse;
  const float *q, *k, *v;
  const int32_t* doc_start;
  int T, H, KV;
  float scale_log2;  // log2(e) / sqrt(D): scores in the log2 domain
};

// S (16 x 64 per warp) = Q K^T, masked, in the log2 domain (masked = -inf).
template <int D>
__device__ void scores(float (&s)[kFwdKeys / 8][4], const uint32_t (&qf)[D / 16][4],
                       const __nv_bfloat16* ks, int lane) {
  constexpr int kLd = D + kPad;
#pragma unroll
  for (int n = 0; n < kFwdKeys / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
  }
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int nb = 0; nb < kFwdKeys / 16; ++nb) {
      uint32_t kf[4];
      mma::load_b_nk<kLd>(kf, ks, nb * 16, kk * 16, lane);
      mma::mma_bf16(s[2 * nb], qf[kk], kf[0], kf[1]);
      mma::mma_bf16(s[2 * nb + 1], qf[kk], kf[2], kf[3]);
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kFwdThreads, 1) flash_forward_kernel(FlashForward p) {
  constexpr int kLd = D + kPad, kNs = kFwdKeys / 8, kNo = D / 8;
  __shared__ __align__(16) __nv_bfloat16 ks[kFwdKeys * kLd];
  __shared__ __align__(16) __nv_bfloat16 vs[kFwdKeys * kLd];
  __shared__ int min_slot;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int b = blockIdx.z, h = blockIdx.y, g = h / (p.H / p.KV), T = p.T;
  const int i0 = (gridDim.x - 1 - blockIdx.x) * kFwdRows;
  const long long ldq = static_cast<long long>(p.H) * D, ldk = static_cast<long long>(p.KV) * D;
  const float* qh = p.q + static_cast<long long>(b) * T * ldq + static_cast<long long>(h) * D;
  const float* kh = p.k + static_cast<long long>(b) * T * ldk + static_cast<long long>(g) * D;
  const float* vh = p.v + static_cast<long long>(b) * T * ldk + static_cast<long long>(g) * D;
  const int32_t* ds = p.doc_start ? p.doc_start + static_cast<long long>(b) * T : nullptr;

  // This thread's two rows (accumulator elements 0-1 and 2-3) and their doc starts.
  int row[2], row_ds[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row[r] = i0 + warp * 16 + frag::acc_row(lane, 2 * r);
    row_ds[r] = ds != nullptr && row[r] < T ? ds[row[r]] : 0;
  }
  const int lo = mma::block_min_doc_start(&min_slot, ds, i0, kFwdRows, T);

  mma::stage_bf16<kFwdRows, D, kFwdThreads>(ks, qh, ldq, i0, T);
  __syncthreads();
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) mma::load_a<kLd>(qf[kk], ks, warp * 16, kk * 16, lane);
  __syncthreads();

  float o[kNo][4];
#pragma unroll
  for (int n = 0; n < kNo; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const BlockRange keys = key_blocks_for_queries(i0, kFwdRows, lo, kFwdKeys, T);
  for (int kb = keys.begin; kb < keys.end; ++kb) {
    const int j0 = kb * kFwdKeys;
    mma::stage_bf16<kFwdKeys, D, kFwdThreads>(ks, kh, ldk, j0, T);
    mma::stage_bf16<kFwdKeys, D, kFwdThreads>(vs, vh, ldk, j0, T);
    __syncthreads();
    float s[kNs][4];
    scores<D>(s, qf, ks, lane);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kNs; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, j = j0 + n * 8 + mma::acc_col(lane, e);
        s[n][e] = attends(row[r], j, row_ds[r], T) ? s[n][e] * p.scale_log2 : -INFINITY;
        mx[r] = fmaxf(mx[r], s[n][e]);
      }
    }
    float alpha[2], base[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mnew = fmaxf(m[r], mma::quad_max(mx[r]));
      base[r] = mnew == -INFINITY ? 0.0f : mnew;  // a row with no key yet keeps p = 0
      alpha[r] = exp2f(m[r] - base[r]);
      m[r] = mnew;
    }
#pragma unroll
    for (int n = 0; n < kNs; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2f(s[n][e] - base[e / 2]);
        sum[e / 2] += s[n][e];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + sum[r];  // this lane's columns only
#pragma unroll
    for (int n = 0; n < kNo; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e / 2];
    }
#pragma unroll
    for (int kk = 0; kk < kFwdKeys / 16; ++kk) {
      uint32_t pa[4];
      mma::acc_to_a(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t vf[4];
        mma::load_b_kn<kLd>(vf, vs, kk * 16, dn * 16, lane);
        mma::mma_bf16(o[2 * dn], pa, vf[0], vf[1]);
        mma::mma_bf16(o[2 * dn + 1], pa, vf[2], vf[3]);
      }
    }
    __syncthreads();  // the tiles are restaged next
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = mma::quad_sum(l[r]);
    if (row[r] >= T) continue;
    const float inv = 1.0f / total;
    float* yr =
        p.y + (static_cast<long long>(b) * T + row[r]) * ldq + static_cast<long long>(h) * D;
#pragma unroll
    for (int n = 0; n < kNo; ++n) {
      *reinterpret_cast<float2*>(yr + n * 8 + mma::acc_col(lane, 0)) =
          make_float2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    }
    if (lane % 4 == 0) {
      p.lse[(static_cast<long long>(b) * p.H + h) * T + row[r]] =
          (m[r] + log2f(total)) * 0.69314718055994531f;
    }
  }
}

template <int D>
void launch_forward(const FlashForward& p, const AttnShape& s, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(blocks_of(s.T, kFwdRows)), static_cast<unsigned>(s.H),
                  static_cast<unsigned>(s.B));
  KILN_LAUNCH(grid, kFwdThreads, 0, stream, flash_forward_kernel<D>)(p);
  KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void flash_attention_forward(float* y, float* lse, const float* q, const float* k, const float* v,
                             const int32_t* doc_start, const AttnShape& s, cudaStream_t stream) {
  check_flash_shape(s, {q, k, v, y});
  if (s.B == 0 || s.T == 0 || s.H == 0) return;
  const FlashForward p{
      y,         lse, q,   k,    v,
      doc_start, s.T, s.H, s.KV, 1.4426950408889634f / std::sqrt(static_cast<float>(s.D))};
  if (s.D == 64) {
    launch_forward<64>(p, s, stream);
  } else {
    launch_forward<128>(p, s, stream);
  }
}

}  // namespace kiln::cuda
