// RMSNorm on the GPU, alone and fused with the residual add: one block per row, the sum of
// squares in double in a fixed order (block_sum), as the CPU computes it. w is F32 or BF16, out
// F32 or BF16 (rounded to nearest even). The backward is in rmsnorm_backward.cu.
#include <cuda_runtime.h>

#include "kiln/kernels/cuda/device_math.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/pointwise_ops.h"

namespace kiln::cuda {

namespace {
constexpr int kThreads = 256;

// r = 1/sqrt(mean(x^2) + eps) from the row's sum of squares, as the CPU's rms_scale.
__device__ __forceinline__ float rms_scale(double sum_sq, int C, float eps) {
  return static_cast<float>(1.0 / sqrt(sum_sq / C + eps));
}

// out row = x row * r * w, r into rstd; xr is the row (read twice: the second pass hits L1/L2).
template <typename TW, typename TO>
__device__ __forceinline__ void normalize_row(TO* out, float* rstd, const float* xr, double ss,
                                              const TW* w, int C, float eps, double* shared) {
  const float r = rms_scale(block_sum<kThreads>(ss, shared), C, eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  const size_t row = static_cast<size_t>(blockIdx.x) * C;
  for (int c = threadIdx.x; c < C; c += kThreads)
    store_f32(out, row + c, xr[c] * r * load_f32(w, c));
}

// x, out: (N, C); one block per row.
template <typename TW, typename TO>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_kernel(TO* out, float* rstd, const float* x, const TW* w, int C, float eps) {
  __shared__ double shared[kThreads / 32];
  const float* xr = x + static_cast<size_t>(blockIdx.x) * C;
  double ss = 0;
  for (int c = threadIdx.x; c < C; c += kThreads) ss += static_cast<double>(xr[c]) * xr[c];
  normalize_row(out, rstd, xr, ss, w, C, eps, shared);
}

// sum = a + b (sum may alias a or b: each thread reads its elements before writing them), then
// RMSNorm of sum. Each thread reads back only what it wrote itself.
template <typename TW, typename TO>
__global__ void __launch_bounds__(kThreads)
    add_rmsnorm_forward_kernel(float* sum, TO* out, float* rstd, const float* a, const float* b,
                               const TW* w, int C, float eps) {
  __shared__ double shared[kThreads / 32];
  const size_t row = static_cast<size_t>(blockIdx.x) * C;
  double ss = 0;
  for (int c = threadIdx.x; c < C; c += kThreads) {
    const float s = a[row + c] + b[row + c];
    sum[row + c] = s;
    ss += static_cast<double>(s) * s;
  }
  normalize_row(out, rstd, sum + row, ss, w, C, eps, shared);
}
}  // namespace

void rmsnorm_forward(DevPtr out, float* rstd, const float* x, ConstDevPtr w, int N, int C,
                     float eps, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  with_dtype(w.dtype, "rmsnorm_forward weight", [&](auto wtag) {
    with_dtype(out.dtype, "rmsnorm_forward output", [&](auto otag) {
      using TW = decltype(wtag);
      using TO = decltype(otag);
      KILN_LAUNCH(N, kThreads, 0, stream, rmsnorm_forward_kernel<TW, TO>)
      (static_cast<TO*>(out.data), rstd, x, static_cast<const TW*>(w.data), C, eps);
    });
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void add_rmsnorm_forward(float* sum, DevPtr out, float* rstd, const float* a, const float* b,
                         ConstDevPtr w, int N, int C, float eps, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  with_dtype(w.dtype, "add_rmsnorm_forward weight", [&](auto wtag) {
    with_dtype(out.dtype, "add_rmsnorm_forward output", [&](auto otag) {
      using TW = decltype(wtag);
      using TO = decltype(otag);
      KILN_LAUNCH(N, kThreads, 0, stream, add_rmsnorm_forward_kernel<TW, TO>)
      (sum, static_cast<TO*>(out.data), rstd, a, b, static_cast<const TW*>(w.data), C, eps);
    });
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
