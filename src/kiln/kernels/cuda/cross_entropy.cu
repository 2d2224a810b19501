// Kernels of the fused LM head + cross-entropy (cross_entropy_kernels.h).
#include <cmath>

#include "kiln/kernels/cuda/cross_entropy_kernels.h"
#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/device_math.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/ops.h"

namespace kiln::cuda {

namespace {
constexpr int kCompactThreads = 1024;
constexpr int kRowThreads = 256;      // gather and scatter: one block per row
constexpr int kSoftmaxThreads = 512;  // one block per row of logits
constexpr int kLossThreads = 1024;

// One block of kCompactThreads: tiles of targets, each an exclusive prefix sum of the flags
// (warp scans, then a scan of the warp totals), placed after the rows of earlier tiles. Rows
// past `padded` (a caller that miscounted its targets) are dropped, never written out of bounds.
__global__ void __launch_bounds__(kCompactThreads)
    compact_rows_kernel(int32_t* rows, const int32_t* targets, int N, int padded) {
  constexpr int32_t kIgnore = kIgnoreIndex;
  __shared__ int warp_incl[32];
  __shared__ int base;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  if (threadIdx.x == 0) base = 0;
  __syncthreads();
  for (int n0 = 0; n0 < N; n0 += blockDim.x) {
    const int n = n0 + threadIdx.x;
    const int flag = n < N && targets[n] != kIgnore ? 1 : 0;
    int incl = flag;
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    if (lane == 31) warp_incl[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      int w = lane < warps ? warp_incl[lane] : 0;
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, w, o);
        if (lane >= o) w += y;
      }
      warp_incl[lane] = w;
    }
    __syncthreads();
    const int excl = incl - flag + (warp > 0 ? warp_incl[warp - 1] : 0);
    if (flag && base + excl < padded) rows[base + excl] = n;
    __syncthreads();
    if (threadIdx.x == 0) base += warp_incl[warps - 1];
    __syncthreads();
  }
  for (int i = min(base, padded) + threadIdx.x; i < padded; i += blockDim.x) rows[i] = -1;
}

// bf16 exactly as the CPU's to_bf16 (bf16_bits: denormals flushed, NaN kept quiet), not
// __float2bfloat16_rn, which keeps denormals: tiny dlogits (scale * p) must round alike.
__device__ inline void store(float* p, float v) { *p = v; }
__device__ inline void store(uint16_t* p, float v) { *p = bf16_bits(v); }

// Block i copies row rows[i] of x (C) into xr[i], or zeros for padding.
template <typename T>
__global__ void gather_rows_kernel(T* xr, const float* x, const int32_t* rows, int C) {
  const int src = rows[blockIdx.x];
  T* out = xr + static_cast<size_t>(blockIdx.x) * C;
  const float* in = x + static_cast<size_t>(src < 0 ? 0 : src) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) store(out + c, src < 0 ? 0.0f : in[c]);
}

// Block i: the loss of logits row i (V) and, when dlogits is non-null, its gradient. dlogits may
// alias logits (fp32): each element is read before it is written, by the thread that writes it,
// and the target's logit is read before the first barrier.
template <typename G>
__global__ void softmax_rows_kernel(double* row_loss, G* dlogits, const float* logits,
                                    const int32_t* targets, const int32_t* rows, int V,
                                    float scale) {
  const size_t row = blockIdx.x;
  const int src = rows[row];
  const float* lg = logits + row * V;
  G* dl = dlogits == nullptr ? nullptr : dlogits + row * V;
  if (src < 0) {  // padding: the whole block returns
    if (dl != nullptr) {
      for (int j = threadIdx.x; j < V; j += blockDim.x) store(dl + j, 0.0f);
    }
    if (threadIdx.x == 0) row_loss[row] = 0.0;
    return;
  }
  const int t = targets[src];
  const bool valid = t >= 0 && t < V;
  const float target_logit = threadIdx.x == 0 && valid ? lg[t] : 0.0f;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, lg[j]);
  m = block_all_reduce(m, BlockMax{}, -INFINITY);
  float part = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) part += expf(lg[j] - m);
  const double sum = block_all_reduce(static_cast<double>(part), BlockPlus{}, 0.0);
  if (threadIdx.x == 0) {
    row_loss[row] = valid ? static_cast<double>(m) + log(sum) - static_cast<double>(target_logit)
                          : static_cast<double>(NAN);
  }
  if (dl == nullptr) return;
  const float k = static_cast<float>(scale / sum);
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float d = expf(lg[j] - m) * k;
    if (j == t) d -= scale;
    store(dl + j, d);
  }
}

__global__ void scatter_rows_kernel(float* dx, const float* dxr, const int32_t* rows, int C) {
  const int dst = rows[blockIdx.x];
  if (dst < 0) return;
  const float* in = dxr + static_cast<size_t>(blockIdx.x) * C;
  float* out = dx + static_cast<size_t>(dst) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) out[c] = in[c];
}

__global__ void __launch_bounds__(kLossThreads)
    add_loss_sum_kernel(double* loss_sum, const double* row_loss, int n) {
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += row_loss[i];
  s = block_all_reduce(s, BlockPlus{}, 0.0);
  if (threadIdx.x == 0) *loss_sum += s;
}
}  // namespace

void ce_compact_rows(int32_t* rows, const int32_t* targets, int N, int padded,
                     cudaStream_t stream) {
  KILN_LAUNCH(1, kCompactThreads, 0, stream, compact_rows_kernel)(rows, targets, N, padded);
  KILN_CUDA_CHECK(cudaGetLastError());
}

void ce_gather_rows_f32(float* xr, const float* x, const int32_t* rows, int r, int C,
                        cudaStream_t stream) {
  KILN_LAUNCH(r, kRowThreads, 0, stream, gather_rows_kernel<float>)(xr, x, rows, C);
  KILN_CUDA_CHECK(cudaGetLastError());
}

void ce_gather_rows_bf16(uint16_t* xr, const float* x, const int32_t* rows, int r, int C,
                         cudaStream_t stream) {
  KILN_LAUNCH(r, kRowThreads, 0, stream, gather_rows_kernel<uint16_t>)(xr, x, rows, C);
  KILN_CUDA_CHECK(cudaGetLastError());
}

void ce_softmax_rows(double* row_loss, const float* logits, const int32_t* targets,
                     const int32_t* rows, int r, int V, cudaStream_t stream) {
  KILN_LAUNCH(r, kSoftmaxThreads, 0, stream, softmax_rows_kernel<float>)
  (row_loss, nullptr, logits, targets, rows, V, 0.0f);
  KILN_CUDA_CHECK(cudaGetLastError());
}

void ce_softmax_grad_rows_f32(double* row_loss, float* dlogits, const float* logits,
                              const int32_t* targets, const int32_t* rows, int r, int V,
                              float scale, cudaStream_t stream) {
  KILN_LAUNCH(r, kSoftmaxThreads, 0, stream, softmax_rows_kernel<float>)
  (row_loss, dlogits, logits, targets, rows, V, scale);
  KILN_CUDA_CHECK(cudaGetLastError());
}

void ce_softmax_grad_rows_bf16(double* row_loss, uint16_t* dlogits, const float* logits,
                               const int32_t* targets, const int32_t* rows, int r, int V,
                               float scale, cudaStream_t stream) {
  KILN_LAUNCH(r, kSoftmaxThreads, 0, stream, softmax_rows_kernel<uint16_t>)
  (row_loss, dlogits, logits, targets, rows, V, scale);
  KILN_CUDA_CHECK(cudaGetLastError());
}

void ce_scatter_rows(float* dx, const float* dxr, const int32_t* rows, int r, int C,
                     cudaStream_t stream) {
  KILN_LAUNCH(r, kRowThreads, 0, stream, scatter_rows_kernel)(dx, dxr, rows, C);
  KILN_CUDA_CHECK(cudaGetLastError());
}

void ce_add_loss_sum(double* loss_sum, const double* row_loss, int n, cudaStream_t stream) {
  KILN_LAUNCH(1, kLossThreads, 0, stream, add_loss_sum_kernel)(loss_sum, row_loss, n);
  KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
