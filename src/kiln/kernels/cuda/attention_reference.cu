// Plain fp32 attention kernels for any head_dim <= 256 (kernels/cuda/attention_ops.h): the check
// of the flash kernels on a GPU and the fallback for other head sizes. One warp per query row
// (forward, dQ) or key row (dK/dV); each lane holds d = lane + 32u of its row (u < 8), scores are
// warp dot products (a butterfly, so every lane holds the same bits and branches on them alike),
// and the rows of the other side are staged kRefTile at a time in shared memory for the block's
// 8 warps. Forward keeps an online softmax (running max m and sum l per row). Backward is
// deterministic: dQ loops over keys per query row, dK/dV over queries (and the kv group's query
// heads in order) per key row, no atomics.
#include <climits>
#include <cmath>

#include "kiln/kernels/cuda/attention_internal.h"
#include "kiln/kernels/cuda/attention_ops.h"
#include "kiln/kernels/cuda/attention_tiling.h"
#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/launch.cuh"

namespace kiln::cuda {

namespace {

constexpr int kRefWarps = 8;            // rows per block, one warp each: block 256 threads
constexpr int kRefTile = 16;            // rows of the other side staged in shared memory at a time
constexpr int kRefMaxD = 256;           // head_dim bound
constexpr int kRefPer = kRefMaxD / 32;  // row elements per lane

using Row = float[kRefPer];

// One head's rows of a (B, rows, heads, D) tensor: row r at base + r * ld.
struct HeadRows {
  const float* base;
  long long ld;
  int n;  // rows that exist; staged rows past n are zero
};

__device__ HeadRows head_rows(const float* x, int b, int head, int n, int heads, int D) {
  const long long ld = static_cast<long long>(heads) * D;
  return {x + static_cast<long long>(b) * n * ld + static_cast<long long>(head) * D, ld, n};
}

// tile (kRefTile, kRefMaxD) = rows [r0, r0 + kRefTile) of x, columns [0, D); by the whole block.
__device__ void stage_rows(float (*tile)[kRefMaxD], HeadRows x, int r0, int D) {
  for (int e = threadIdx.x; e < kRefTile * D; e += blockDim.x) {
    const int r = e / D, d = e % D, row = r0 + r;
    tile[r][d] = row < x.n ? x.base[row * x.ld + d] : 0.0f;
  }
}

// This lane's elements d = lane + 32u of row `row` (zero past D).
__device__ void load_row(Row& out, const float* row, int D, int lane) {
#pragma unroll
  for (int u = 0; u < kRefPer; ++u) {
    const int d = lane + 32 * u;
    out[u] = d < D ? row[d] : 0.0f;
  }
}

// sum over d of x[d] * row[d], the same bits in every lane.
__device__ float warp_dot(const Row& x, const float* row, int D, int lane) {
  float acc = 0.0f;
#pragma unroll
  for (int u = 0; u < kRefPer; ++u) {
    const int d = lane + 32 * u;
    if (d < D) acc += x[u] * row[d];
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  return acc;
}

// acc += a * row (this lane's elements).
__device__ void axpy(Row& acc, float a, const float* row, int D, int lane) {
#pragma unroll
  for (int u = 0; u < kRefPer; ++u) {
    const int d = lane + 32 * u;
    if (d < D) acc[u] += a * row[d];
  }
}

__device__ void store_row(float* out, const Row& x, float a, int D, int lane) {
#pragma unroll
  for (int u = 0; u < kRefPer; ++u) {
    const int d = lane + 32 * u;
    if (d < D) out[d] = a * x[u];
  }
}

// The smallest doc start of the block's valid rows (each warp's lane 0 offers its row's).
__device__ int block_min(int* slot, int value, bool offer) {
  if (threadIdx.x == 0) *slot = INT_MAX;
  __syncthreads();
  if (offer && threadIdx.x % 32 == 0) atomicMin(slot, value);
  __syncthreads();
  return *slot;
}

// Forward over Tq query rows at positions q_pos0 + r against Tk keys (Tq == Tk, q_pos0 = 0 for
// attention_forward; a decode step's new rows over its cache otherwise). lse may be null.
struct RefForward {
  float* y;
  float* lse;
  const float *q, *k, *v;
  const int32_t* doc_start;  // (B, Tq) or null
  int Tq, Tk, H, KV, D, q_pos0;
  float scale;
};

// Grid (ceil(Tq / 8), H, B), block 256: warp w takes query row blockIdx.x * 8 + w of head
// blockIdx.y; K/V staged 16 keys at a time from the block's smallest doc start to its last row.
__global__ void __launch_bounds__(kRefWarps * 32, 1) ref_forward_kernel(RefForward p) {
  __shared__ float ks[kRefTile][kRefMaxD], vs[kRefTile][kRefMaxD];
  __shared__ int lo_slot;
  const int lane = threadIdx.x % 32, b = blockIdx.z, h = blockIdx.y;
  const int r0 = blockIdx.x * kRefWarps, r = r0 + threadIdx.x / 32;
  const int g = h / (p.H / p.KV);
  const bool row_ok = r < p.Tq;
  const int i = p.q_pos0 + r;
  const int ds_i = row_ok && p.doc_start ? p.doc_start[static_cast<long long>(b) * p.Tq + r] : 0;
  const int lo = block_min(&lo_slot, ds_i, row_ok);
  const int last = p.q_pos0 + min(r0 + kRefWarps, p.Tq) - 1;
  const HeadRows qr = head_rows(p.q, b, h, p.Tq, p.H, p.D);
  const HeadRows kr = head_rows(p.k, b, g, p.Tk, p.KV, p.D);
  const HeadRows vr = head_rows(p.v, b, g, p.Tk, p.KV, p.D);
  Row qv, acc;
  load_row(qv, row_ok ? qr.base + r * qr.ld : qr.base, p.D, lane);
#pragma unroll
  for (int u = 0; u < kRefPer; ++u) acc[u] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j0 = lo / kRefTile * kRefTile; j0 <= last; j0 += kRefTile) {
    stage_rows(ks, kr, j0, p.D);
    stage_rows(vs, vr, j0, p.D);
    __syncthreads();
    if (row_ok) {
      float sc[kRefTile];
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < kRefTile; ++c) {
        const int j = j0 + c;
        sc[c] = j >= ds_i && j <= i ? p.scale * warp_dot(qv, ks[c], p.D, lane) : -INFINITY;
        mx = fmaxf(mx, sc[c]);
      }
      if (mx > -INFINITY) {
        const float mnew = fmaxf(m, mx);
        const float alpha = expf(m - mnew);  // 0 on the row's first tile
        l *= alpha;
#pragma unroll
        for (int u = 0; u < kRefPer; ++u) acc[u] *= alpha;
#pragma unroll
        for (int c = 0; c < kRefTile; ++c) {
          const float pc = expf(sc[c] - mnew);  // 0 for masked keys
          l += pc;
          axpy(acc, pc, vs[c], p.D, lane);
        }
        m = mnew;
      }
    }
    __syncthreads();
  }
  if (!row_ok) return;
  store_row(
      p.y + static_cast<long long>(b) * p.Tq * qr.ld + r * qr.ld + static_cast<long long>(h) * p.D,
      acc, 1.0f / l, p.D, lane);
  if (p.lse != nullptr && lane == 0) {
    p.lse[(static_cast<long long>(b) * p.H + h) * p.Tq + r] = m + logf(l);
  }
}

struct RefBackward {
  float *dq, *dk, *dv;
  const float *dy, *q, *k, *v, *lse, *di;
  const int32_t* doc_start;
  int T, H, KV, D;
  float scale;
};

// dQ. Grid (ceil(T / 8), H, B), block 256: warp w takes query row blockIdx.x * 8 + w; keys as in
// the forward. dq_i = scale * sum_j p_ij (dy_i . v_j - D_i) k_j.
__global__ void __launch_bounds__(kRefWarps * 32, 1) ref_dq_kernel(RefBackward p) {
  __shared__ float ks[kRefTile][kRefMaxD], vs[kRefTile][kRefMaxD];
  __shared__ int lo_slot;
  const int lane = threadIdx.x % 32, b = blockIdx.z, h = blockIdx.y;
  const int r0 = blockIdx.x * kRefWarps, i = r0 + threadIdx.x / 32;
  const int g = h / (p.H / p.KV);
  const bool row_ok = i < p.T;
  const int ds_i = row_ok && p.doc_start ? p.doc_start[static_cast<long long>(b) * p.T + i] : 0;
  const int lo = block_min(&lo_slot, ds_i, row_ok);
  const int last = min(r0 + kRefWarps, p.T) - 1;
  const HeadRows qr = head_rows(p.q, b, h, p.T, p.H, p.D);
  const HeadRows dyr = head_rows(p.dy, b, h, p.T, p.H, p.D);
  const HeadRows kr = head_rows(p.k, b, g, p.T, p.KV, p.D);
  const HeadRows vr = head_rows(p.v, b, g, p.T, p.KV, p.D);
  const int ii = row_ok ? i : 0;
  const long long stat = (static_cast<long long>(b) * p.H + h) * p.T + ii;
  const float lse_i = p.lse[stat], di_i = p.di[stat];
  Row qv, dyv, acc;
  load_row(qv, qr.base + ii * qr.ld, p.D, lane);
  load_row(dyv, dyr.base + ii * dyr.ld, p.D, lane);
#pragma unroll
  for (int u = 0; u < kRefPer; ++u) acc[u] = 0.0f;
  for (int j0 = lo / kRefTile * kRefTile; j0 <= last; j0 += kRefTile) {
    stage_rows(ks, kr, j0, p.D);
    stage_rows(vs, vr, j0, p.D);
    __syncthreads();
    if (row_ok) {
#pragma unroll 1
      for (int c = 0; c < kRefTile; ++c) {
        const int j = j0 + c;
        if (j < ds_i || j > i) continue;  // the same in every lane
        const float pc = expf(p.scale * warp_dot(qv, ks[c], p.D, lane) - lse_i);
        const float dsc = pc * (warp_dot(dyv, vs[c], p.D, lane) - di_i);
        axpy(acc, dsc, ks[c], p.D, lane);
      }
    }
    __syncthreads();
  }
  if (row_ok) {
    store_row(p.dq + static_cast<long long>(b) * p.T * qr.ld + i * qr.ld +
                  static_cast<long long>(h) * p.D,
              acc, p.scale, p.D, lane);
  }
}

// dK, dV. Grid (ceil(T / 8), KV, B), block 256: warp w takes key row j = blockIdx.x * 8 + w of
// kv head blockIdx.y and loops over the group's query heads in order, and over query rows from
// the block's first key on, 16 staged at a time with their lse, D and doc starts.
// dv_j = sum_i p_ij dy_i, dk_j = scale * sum_i p_ij (dy_i . v_j - D_i) q_i.
__global__ void __launch_bounds__(kRefWarps * 32, 1) ref_dkdv_kernel(RefBackward p) {
  __shared__ float qs[kRefTile][kRefMaxD], dys[kRefTile][kRefMaxD];
  __shared__ float lses[kRefTile], dis[kRefTile];
  __shared__ int dss[kRefTile];
  const int lane = threadIdx.x % 32, b = blockIdx.z, g = blockIdx.y;
  const int j_first = blockIdx.x * kRefWarps, j = j_first + threadIdx.x / 32;
  const int group = p.H / p.KV;
  const bool key_ok = j < p.T;
  const int jj = key_ok ? j : 0;
  const HeadRows kr = head_rows(p.k, b, g, p.T, p.KV, p.D);
  const HeadRows vr = head_rows(p.v, b, g, p.T, p.KV, p.D);
  Row kv, vv, dk, dv;
  load_row(kv, kr.base + jj * kr.ld, p.D, lane);
  load_row(vv, vr.base + jj * vr.ld, p.D, lane);
#pragma unroll
  for (int u = 0; u < kRefPer; ++u) dk[u] = dv[u] = 0.0f;
  for (int r = 0; r < group; ++r) {
    const int h = g * group + r;
    const HeadRows qr = head_rows(p.q, b, h, p.T, p.H, p.D);
    const HeadRows dyr = head_rows(p.dy, b, h, p.T, p.H, p.D);
    const long long stat0 = (static_cast<long long>(b) * p.H + h) * p.T;
    for (int i0 = j_first; i0 < p.T; i0 += kRefTile) {
      stage_rows(qs, qr, i0, p.D);
      stage_rows(dys, dyr, i0, p.D);
      if (threadIdx.x < kRefTile) {
        const int i = i0 + threadIdx.x;
        lses[threadIdx.x] = i < p.T ? p.lse[stat0 + i] : 0.0f;
        dis[threadIdx.x] = i < p.T ? p.di[stat0 + i] : 0.0f;
        dss[threadIdx.x] =
            i >= p.T ? INT_MAX
                     : (p.doc_start ? p.doc_start[static_cast<long long>(b) * p.T + i] : 0);
      }
      __syncthreads();
      if (key_ok) {
#pragma unroll 1
        for (int c = 0; c < kRefTile; ++c) {
          if (!attends(i0 + c, j, dss[c], p.T)) continue;  // the same in every lane
          const float pc = expf(p.scale * warp_dot(kv, qs[c], p.D, lane) - lses[c]);
          const float dsc = pc * (warp_dot(vv, dys[c], p.D, lane) - dis[c]);
          axpy(dv, pc, dys[c], p.D, lane);
          axpy(dk, dsc, qs[c], p.D, lane);
        }
      }
      __syncthreads();
    }
  }
  if (!key_ok) return;
  const long long off =
      static_cast<long long>(b) * p.T * kr.ld + j * kr.ld + static_cast<long long>(g) * p.D;
  store_row(p.dk + off, dk, p.scale, p.D, lane);
  store_row(p.dv + off, dv, 1.0f, p.D, lane);
}

void check_shape(const AttnShape& s) { check_attention_shape(s, kRefMaxD, "reference"); }

dim3 row_grid(int rows, int heads, int B) {
  return dim3(static_cast<unsigned>(blocks_of(rows, kRefWarps)), static_cast<unsigned>(heads),
              static_cast<unsigned>(B));
}

}  // namespace

void reference_attention_forward(float* y, float* lse, const float* q, const float* k,
                                 const float* v, const int32_t* doc_start, const AttnShape& s,
                                 cudaStream_t stream) {
  check_shape(s);
  if (s.B == 0 || s.T == 0 || s.H == 0) return;
  const RefForward p{y,
                     lse,
                     q,
                     k,
                     v,
                     doc_start,
                     s.T,
                     s.T,
                     s.H,
                     s.KV,
                     s.D,
                     0,
                     1.0f / std::sqrt(static_cast<float>(s.D))};
  KILN_LAUNCH(row_grid(s.T, s.H, s.B), kRefWarps * 32, 0, stream, ref_forward_kernel)(p);
  KILN_CUDA_CHECK(cudaGetLastError());
}

void reference_attention_backward(float* dq, float* dk, float* dv, const float* dy, const float* q,
                                  const float* k, const float* v, const float* y, const float* lse,
                                  const int32_t* doc_start, const AttnShape& s, void* scratch,
                                  cudaStream_t stream) {
  check_shape(s);
  if (s.B == 0 || s.T == 0 || s.H == 0) return;
  float* di = backward_scratch(scratch, s).di;
  attention_row_dot(di, dy, y, s, stream);
  const RefBackward p{dq,  dk,  dv,   dy,  q,
                      k,   v,   lse,  di,  doc_start,
                      s.T, s.H, s.KV, s.D, 1.0f / std::sqrt(static_cast<float>(s.D))};
  KILN_LAUNCH(row_grid(s.T, s.H, s.B), kRefWarps * 32, 0, stream, ref_dq_kernel)(p);
  KILN_CUDA_CHECK(cudaGetLastError());
  KILN_LAUNCH(row_grid(s.T, s.KV, s.B), kRefWarps * 32, 0, stream, ref_dkdv_kernel)(p);
  KILN_CUDA_CHECK(cudaGetLastError());
}

// Rows [past, past + n_q) of the forward over the whole cache: the new tokens' rows as the
// forward's query rows at positions past + r (no doc starts, no lse).
void attention_decode(float* y, const float* q, const float* k_cache, const float* v_cache, int n_q,
                      int past, int H, int KV, int D, cudaStream_t stream) {
  check_shape(AttnShape{1, n_q, H, KV, D});
  if (n_q <= 0 || H == 0) return;
  const RefForward p{y,
                     nullptr,
                     q,
                     k_cache,
                     v_cache,
                     nullptr,
                     n_q,
                     past + n_q,
                     H,
                     KV,
                     D,
                     past,
                     1.0f / std::sqrt(static_cast<float>(D))};
  KILN_LAUNCH(row_grid(n_q, H, 1), kRefWarps * 32, 0, stream, ref_forward_kernel)(p);
  KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
