// The two small kernels both attention backwards share (kernels/cuda/attention_internal.h).
#include "kiln/kernels/cuda/attention_internal.h"
#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/launch.cuh"

namespace kiln::cuda {

namespace {

constexpr int kRowDotWarps = 8;  // rows per block of row_dot_kernel: one warp each

// One warp per (b, t, h) row: lanes take d = lane, lane + 32, ... and a butterfly sums them.
// Grid: (ceil(B*T*H / 8)), block 256.
__global__ void __launch_bounds__(kRowDotWarps * 32)
    row_dot_kernel(float* di, const float* dy, const float* y, int B, int T, int H, int D) {
  const int lane = threadIdx.x % 32;
  const long long row = static_cast<long long>(blockIdx.x) * kRowDotWarps + threadIdx.x / 32;
  if (row >= static_cast<long long>(B) * T * H) return;  // whole warps leave together
  const float* a = dy + row * D;
  const float* c = y + row * D;
  float acc = 0.0f;
  for (int d = lane; d < D; d += 32) acc += a[d] * c[d];
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) {
    // row = (b * T + t) * H + h  ->  di[(b * H + h) * T + t]
    const int h = static_cast<int>(row % H);
    const long long bt = row / H;
    const int t = static_cast<int>(bt % T);
    const long long b = bt / T;
    di[(b * H + h) * T + t] = acc;
  }
}

// One thread per element of dkv (B, T, KV, D).
__global__ void sum_parts_kernel(float* dkv, const float* part, long long n, int splits, int D) {
  const long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const int d = static_cast<int>(e % D);
  const long long gt = e / D;  // (b * T + t) * KV + g: parts start at (gt * splits) * D
  const float* src = part + gt * splits * D + d;
  float acc = 0.0f;
  for (int r = 0; r < splits; ++r) acc += src[static_cast<long long>(r) * D];
  dkv[e] = acc;
}

}  // namespace

void attention_row_dot(float* di, const float* dy, const float* y, const AttnShape& s,
                       cudaStream_t stream) {
  const long long rows = static_cast<long long>(s.B) * s.T * s.H;
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>((rows + kRowDotWarps - 1) / kRowDotWarps);
  KILN_LAUNCH(blocks, kRowDotWarps * 32, 0, stream, row_dot_kernel)(di, dy, y, s.B, s.T, s.H, s.D);
  KILN_CUDA_CHECK(cudaGetLastError());
}

void attention_sum_parts(float* dkv, const float* part, const AttnShape& s, int splits,
                         cudaStream_t stream) {
  const long long n = static_cast<long long>(s.B) * s.T * s.KV * s.D;
  if (n == 0) return;
  constexpr int kThreads = 256;
  const unsigned blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  KILN_LAUNCH(blocks, kThreads, 0, stream, sum_parts_kernel)(dkv, part, n, splits, s.D);
  KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
