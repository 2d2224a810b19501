// Kernels of the cross-entropy of a vocabulary split across ranks (Backend::ce_part_max,
// ce_part_sumexp, ce_part_grad, ce_part_row_loss): one block per row of a block of logits,
// fixed-order block reductions, so a run repeats bit for bit.
#include <algorithm>
#include <cmath>

#include "kiln/kernels/cuda/cross_entropy_kernels.h"
#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/device_math.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/ops.h"

namespace kiln::cuda {

namespace {
constexpr int kRowThreads = 256;
constexpr int kLossThreads = 1024;

__device__ bool in_block(int32_t t, int v0, int m) {
  return t != kIgnoreIndex && t >= v0 && t < v0 + m;
}

__global__ void __launch_bounds__(kRowThreads)
    part_max_kernel(float* row_max, const float* logits, int m, int ld, bool accumulate) {
  const size_t i = blockIdx.x;
  const float* lg = logits + i * ld;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < m; j += kRowThreads) mx = fmaxf(mx, lg[j]);
  mx = block_all_reduce(mx, BlockMax{}, -INFINITY);
  if (threadIdx.x == 0) row_max[i] = accumulate ? fmaxf(row_max[i], mx) : mx;
}

__global__ void __launch_bounds__(kRowThreads)
    part_sumexp_kernel(float* sums, const float* logits, const float* row_max,
                       const int32_t* targets, int v0, int m, int ld) {
  const size_t i = blockIdx.x;
  const float* lg = logits + i * ld;
  const float mx = row_max[i];
  float s = 0;
  for (int j = threadIdx.x; j < m; j += kRowThreads) s += __expf(lg[j] - mx);
  s = block_all_reduce(s, BlockPlus{}, 0.0f);
  if (threadIdx.x == 0) {
    sums[2 * i] += s;
    const int32_t t = targets[i];
    if (in_block(t, v0, m)) sums[2 * i + 1] += lg[t - v0];
  }
}

__global__ void __launch_bounds__(kRowThreads)
    part_grad_kernel(float* logits, const float* row_max, const float* sums, const int32_t* targets,
                     int v0, int m, int ld, float scale_all, const float* row_weight) {
  const size_t i = blockIdx.x;
  const float scale = row_weight != nullptr ? scale_all * row_weight[i] : scale_all;
  float* lg = logits + i * ld;
  const int32_t t = targets[i];
  if (t == kIgnoreIndex) {  // the same in every thread of the block
    for (int j = threadIdx.x; j < m; j += kRowThreads) lg[j] = 0.0f;
    return;
  }
  const float lse = row_max[i] + logf(sums[2 * i]);
  for (int j = threadIdx.x; j < m; j += kRowThreads) lg[j] = scale * __expf(lg[j] - lse);
  __syncthreads();  // the target's element was written by some thread of the block
  if (threadIdx.x == 0 && in_block(t, v0, m)) lg[t - v0] -= scale;
}

__global__ void __launch_bounds__(kLossThreads)
    part_loss_kernel(double* loss_sum, const float* row_max, const float* sums,
                     const int32_t* targets, int begin, int end) {
  double s = 0;
  for (int i = begin + static_cast<int>(threadIdx.x); i < end; i += kLossThreads) {
    if (targets[i] == kIgnoreIndex) continue;
    s += static_cast<double>(row_max[i]) + log(static_cast<double>(sums[2 * i])) -
         static_cast<double>(sums[2 * i + 1]);
  }
  s = block_all_reduce(s, BlockPlus{}, 0.0);
  if (threadIdx.x == 0) *loss_sum += s;
}
__global__ void __launch_bounds__(kRowThreads)
    part_row_loss_kernel(float* row_loss, const float* row_max, const float* sums,
                         const int32_t* targets, int n) {
  const int i = static_cast<int>(blockIdx.x) * kRowThreads + static_cast<int>(threadIdx.x);
  if (i >= n) return;
  row_loss[i] = targets[i] == kIgnoreIndex
                    ? 0.0f
                    : static_cast<float>(static_cast<double>(row_max[i]) +
                                         log(static_cast<double>(sums[2 * i])) -
                                         static_cast<double>(sums[2 * i + 1]));
}
}  // namespace

void ce_part_max(float* row_max, const float* logits, int n, int m, int ld, bool accumulate,
                 cudaStream_t stream) {
  if (n == 0) return;
  KILN_LAUNCH(n, kRowThreads, 0, stream, part_max_kernel)(row_max, logits, m, ld, accumulate);
  KILN_CUDA_CHECK_LAUNCH();
}

void ce_part_sumexp(float* sums, const float* logits, const float* row_max, const int32_t* targets,
                    int v0, int n, int m, int ld, cudaStream_t stream) {
  if (n == 0 || m == 0) return;
  KILN_LAUNCH(n, kRowThreads, 0, stream, part_sumexp_kernel)
  (sums, logits, row_max, targets, v0, m, ld);
  KILN_CUDA_CHECK_LAUNCH();
}

void ce_part_grad(float* logits, double* loss_sum, const float* row_max, const float* sums,
                  const int32_t* targets, int v0, int n, int m, int ld, float scale,
                  const float* row_weight, int loss_begin, int loss_end, cudaStream_t stream) {
  if (n == 0) return;
  const int begin = std::max(0, loss_begin), end = std::min(n, loss_end);
  if (loss_sum != nullptr && begin < end) {
    KILN_LAUNCH(1, kLossThreads, 0, stream, part_loss_kernel)
    (loss_sum, row_max, sums, targets, begin, end);
    KILN_CUDA_CHECK_LAUNCH();
  }
  if (m == 0) return;
  KILN_LAUNCH(n, kRowThreads, 0, stream, part_grad_kernel)
  (logits, row_max, sums, targets, v0, m, ld, scale, row_weight);
  KILN_CUDA_CHECK_LAUNCH();
}

void ce_part_row_loss(float* row_loss, const float* row_max, const float* sums,
                      const int32_t* targets, int n, cudaStream_t stream) {
  if (n == 0) return;
  KILN_LAUNCH((n + kRowThreads - 1) / kRowThreads, kRowThreads, 0, stream, part_row_loss_kernel)
  (row_loss, row_max, sums, targets, n);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
