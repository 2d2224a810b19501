// Sums and scalings over flat float arrays on the GPU: add, scale, scale_rows, sum of squares into
// a device double (fixed blocks, fixed order: the result does not depend on the launch), and
// gradient clipping by a norm that stays on the device.
#include <cuda_runtime.h>

#include "kiln/kernels/cuda/device_math.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/pointwise_ops.h"
#include "kiln/kernels/cuda/stream_scratch.h"
#include "kiln/kernels/cuda/vector_access.cuh"

namespace kiln::cuda {

namespace {
constexpr int kThreads = 256;

// out = a + b over quads (q quads of 4) then the scalar tail from 4q; out may alias a or b.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    add_kernel(float* out, const float* a, const float* b, size_t n) {
  size_t i = grid_index();
  if constexpr (kVec) {
    const size_t quads = n / 4;
    for (; i < quads; i += grid_stride()) {
      const float4 x = load4(a + 4 * i), y = load4(b + 4 * i);
      store4(out + 4 * i, make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w));
    }
    i = 4 * quads + grid_index();
  }
  for (; i < n; i += grid_stride()) out[i] = a[i] + b[i];
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) scale_kernel(float* x, float a, size_t n) {
  size_t i = grid_index();
  if constexpr (kVec) {
    const size_t quads = n / 4;
    for (; i < quads; i += grid_stride()) {
      const float4 v = load4(x + 4 * i);
      store4(x + 4 * i, make_float4(v.x * a, v.y * a, v.z * a, v.w * a));
    }
    i = 4 * quads + grid_index();
  }
  for (; i < n; i += grid_stride()) x[i] *= a;
}

// x (n, C): row i *= row_scale[i], one element a thread (grid-stride).
__global__ void __launch_bounds__(kThreads)
    scale_rows_kernel(float* x, const float* row_scale, size_t n, size_t C) {
  for (size_t i = grid_index(); i < n * C; i += grid_stride()) x[i] *= row_scale[i / C];
}

// Sum of squares: block b of the grid sums elements [b, b + 1) * kSumBlock into partial[b]
// (double); then one block adds the partials. Both orders are fixed by the constants, never by
// the launch, so a run repeats bit for bit.
constexpr size_t kSumBlock = size_t{1} << 14;

__global__ void __launch_bounds__(kThreads)
    sum_squares_partial_kernel(double* partial, const float* x, size_t n) {
  __shared__ double shared[kThreads / 32];
  const size_t i0 = blockIdx.x * kSumBlock;
  const size_t i1 = i0 + kSumBlock < n ? i0 + kSumBlock : n;
  double s = 0;
  for (size_t i = i0 + threadIdx.x; i < i1; i += kThreads) s += static_cast<double>(x[i]) * x[i];
  s = block_sum<kThreads>(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kThreads)
    sum_squares_finish_kernel(double* sum, const double* partial, size_t blocks) {
  __shared__ double shared[kThreads / 32];
  double s = 0;
  for (size_t b = threadIdx.x; b < blocks; b += kThreads) s += partial[b];
  s = block_sum<kThreads>(s, shared);
  if (threadIdx.x == 0) *sum += s;
}

// x *= max_norm / (norm + 1e-6) when norm = sqrt(*sq_norm) > max_norm; every thread reads the
// norm itself (one cached double), so the host never does.
__global__ void __launch_bounds__(kThreads)
    clip_by_norm_kernel(float* x, size_t n, const double* sq_norm, double max_norm) {
  const double norm = sqrt(*sq_norm);
  if (!(norm > max_norm)) return;
  const float f = static_cast<float>(max_norm / (norm + 1e-6));
  for (size_t i = grid_index(); i < n; i += grid_stride()) x[i] *= f;
}
}  // namespace

void add(float* out, const float* a, const float* b, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (aligned16(out) && aligned16(a) && aligned16(b)) {
    KILN_LAUNCH(grid_for(n / 4 + 1, kThreads), kThreads, 0, stream, add_kernel<true>)(out, a, b, n);
  } else {
    KILN_LAUNCH(grid_for(n, kThreads), kThreads, 0, stream, add_kernel<false>)(out, a, b, n);
  }
  KILN_CUDA_CHECK_LAUNCH();
}

void scale_rows(float* x, const float* row_scale, int n, int C, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(n) * static_cast<size_t>(C);
  if (total == 0) return;
  KILN_LAUNCH(grid_for(total, kThreads), kThreads, 0, stream, scale_rows_kernel)
  (x, row_scale, static_cast<size_t>(n), static_cast<size_t>(C));
  KILN_CUDA_CHECK_LAUNCH();
}

void scale(float* x, float a, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (aligned16(x)) {
    KILN_LAUNCH(grid_for(n / 4 + 1, kThreads), kThreads, 0, stream, scale_kernel<true>)(x, a, n);
  } else {
    KILN_LAUNCH(grid_for(n, kThreads), kThreads, 0, stream, scale_kernel<false>)(x, a, n);
  }
  KILN_CUDA_CHECK_LAUNCH();
}

void sum_squares(double* sum, const float* x, size_t n, cudaStream_t stream,
                 StreamScratchPool& scratch) {
  if (n == 0) return;
  const size_t blocks = (n + kSumBlock - 1) / kSumBlock;
  StreamScratch partial(sizeof(double) * blocks, stream, scratch);
  KILN_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, stream, sum_squares_partial_kernel)
  (partial.as<double>(), x, n);
  KILN_CUDA_CHECK_LAUNCH();
  KILN_LAUNCH(1, kThreads, 0, stream, sum_squares_finish_kernel)(sum, partial.as<double>(), blocks);
  KILN_CUDA_CHECK_LAUNCH();
  partial.release();
}

void clip_by_norm(float* x, size_t n, const double* sq_norm, double max_norm, cudaStream_t stream) {
  if (n == 0) return;
  KILN_LAUNCH(grid_for(n, kThreads), kThreads, 0, stream, clip_by_norm_kernel)
  (x, n, sq_norm, max_norm);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
