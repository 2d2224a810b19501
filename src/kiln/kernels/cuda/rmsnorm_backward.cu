// RMSNorm's backward on the GPU. With y = x * r * w and r = (mean(x^2) + eps)^-1/2:
//   dx = r * (dy * w) - x * r^3 * mean(dy * w * x)   (one block per row, the dot in double)
//   dw += sum_n dy * x * r                            (two passes over fixed row chunks;
//                                                      none when dw is null: a frozen weight)
// The column reduction for dw has a fixed order and no atomics: pass 1 sums each chunk of
// kChunkRows rows per column into scratch, pass 2 adds the chunks' sums in chunk order.
#include <cuda_runtime.h>

#include "kiln/kernels/cuda/device_math.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/pointwise_ops.h"
#include "kiln/kernels/cuda/stream_scratch.h"

namespace kiln::cuda {

namespace {
constexpr int kThreads = 256;

// dx (N, C) row = r * g * w - x * k, written or added to; one block per row.
template <typename TW>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_dx_kernel(float* dx, const float* dout, const float* x, const TW* w, const float* rstd,
                      int C, bool accumulate) {
  __shared__ double shared[kThreads / 32];
  const size_t row = static_cast<size_t>(blockIdx.x) * C;
  const float* g = dout + row;
  const float* xr = x + row;
  double dot = 0;
  for (int c = threadIdx.x; c < C; c += kThreads) {
    dot += static_cast<double>(g[c]) * load_f32(w, c) * xr[c];
  }
  dot = block_sum<kThreads>(dot, shared);
  const float r = rstd[blockIdx.x];
  const float k = static_cast<float>(dot / C) * r * r * r;
  float* d = dx + row;
  for (int c = threadIdx.x; c < C; c += kThreads) {
    const float v = r * g[c] * load_f32(w, c) - xr[c] * k;
    d[c] = accumulate ? d[c] + v : v;
  }
}

// Pass 1: partial (chunks, C), chunk j's column sums of dy * x * r over rows [j, j + 1) *
// kChunkRows (blockIdx.x = j, blockIdx.y = column tile). A block is kTileColumns columns by
// kRowLanes row lanes; lane l sums rows l, l + kRowLanes, ... of the chunk, then lane 0 adds the
// lanes in order.
constexpr int kChunkRows = 64;
constexpr int kTileColumns = 32;
constexpr int kRowLanes = 8;

__global__ void __launch_bounds__(kTileColumns* kRowLanes)
    rmsnorm_dw_partial_kernel(float* partial, const float* dout, const float* x, const float* rstd,
                              int N, int C) {
  __shared__ float lanes[kRowLanes][kTileColumns];
  const int c = blockIdx.y * kTileColumns + threadIdx.x;
  const int n0 = blockIdx.x * kChunkRows;
  const int n1 = min(N, n0 + kChunkRows);
  float s = 0;
  if (c < C) {
    for (int n = n0 + static_cast<int>(threadIdx.y); n < n1; n += kRowLanes) {
      const size_t i = static_cast<size_t>(n) * C + c;
      s += dout[i] * x[i] * rstd[n];
    }
  }
  lanes[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float total = 0;
  for (int l = 0; l < kRowLanes; ++l) total += lanes[l][threadIdx.x];
  partial[static_cast<size_t>(blockIdx.x) * C + c] = total;
}

// Pass 2: dw[c] += the chunks' sums of column c, in chunk order (double).
__global__ void __launch_bounds__(kThreads)
    rmsnorm_dw_finish_kernel(float* dw, const float* partial, int chunks, int C) {
  const int c = blockIdx.x * kThreads + threadIdx.x;
  if (c >= C) return;
  double s = 0;
  for (int j = 0; j < chunks; ++j) s += partial[static_cast<size_t>(j) * C + c];
  dw[c] += static_cast<float>(s);
}
}  // namespace

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, ConstDevPtr w,
                      const float* rstd, int N, int C, bool accumulate, cudaStream_t stream,
                      StreamScratchPool& scratch) {
  if (N == 0 || C == 0) return;
  with_dtype(w.dtype, "rmsnorm_backward weight", [&](auto tag) {
    using TW = decltype(tag);
    KILN_LAUNCH(N, kThreads, 0, stream, rmsnorm_dx_kernel<TW>)
    (dx, dout, x, static_cast<const TW*>(w.data), rstd, C, accumulate);
  });
  KILN_CUDA_CHECK_LAUNCH();
  if (dw == nullptr) return;  // a frozen weight

  const int chunks = (N + kChunkRows - 1) / kChunkRows;
  StreamScratch partial(sizeof(float) * static_cast<size_t>(chunks) * C, stream, scratch);
  const dim3 tile(kTileColumns, kRowLanes);
  const dim3 grid(chunks, (C + kTileColumns - 1) / kTileColumns);  // chunks in x: no 65535 cap
  KILN_LAUNCH(grid, tile, 0, stream, rmsnorm_dw_partial_kernel)
  (partial.as<float>(), dout, x, rstd, N, C);
  KILN_CUDA_CHECK_LAUNCH();
  KILN_LAUNCH((C + kThreads - 1) / kThreads, kThreads, 0, stream, rmsnorm_dw_finish_kernel)
  (dw, partial.as<float>(), chunks, C);
  KILN_CUDA_CHECK_LAUNCH();
  partial.release();
}

}  // namespace kiln::cuda
