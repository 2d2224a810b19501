// Rotary embedding on the GPU (HF rotate-half), in place: each thread rotates one (d, d + D/2)
// pair of one head of one token by +angle (forward) or -angle (backward, the transpose).
#include <cuda_runtime.h>

#include "kiln/kernels/cuda/device_math.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/pointwise_ops.h"

namespace kiln::cuda {

namespace {
constexpr int kThreads = 256;

// x: (N, heads, D); cos/sin tables: (max_pos, D/2); pairs = N * heads * D/2.
__global__ void __launch_bounds__(kThreads)
    rope_rotate_kernel(float* x, const int32_t* pos, const float* cos_table, const float* sin_table,
                       size_t pairs, int heads, int D, float sign) {
  const int half = D / 2;
  for (size_t i = grid_index(); i < pairs; i += grid_stride()) {
    const int d = static_cast<int>(i % half);
    const size_t head_row = i / half;  // n * heads + h
    const size_t n = head_row / heads;
    const size_t t = static_cast<size_t>(pos[n]) * half + d;
    const float cs = cos_table[t];
    const float s = sign * sin_table[t];
    float* v = x + head_row * D;
    const float a = v[d];
    const float b = v[d + half];
    v[d] = a * cs - b * s;
    v[d + half] = b * cs + a * s;
  }
}

void rope_rotate(float* x, const int32_t* pos, const float* cos_table, const float* sin_table,
                 int N, int heads, int D, float sign, cudaStream_t stream) {
  const size_t pairs = static_cast<size_t>(N) * heads * (D / 2);
  if (pairs == 0) return;
  KILN_LAUNCH(grid_for(pairs, kThreads), kThreads, 0, stream, rope_rotate_kernel)
  (x, pos, cos_table, sin_table, pairs, heads, D, sign);
  KILN_CUDA_CHECK_LAUNCH();
}
}  // namespace

void rope_forward(float* x, const int32_t* pos, const float* cos_table, const float* sin_table,
                  int N, int heads, int D, cudaStream_t stream) {
  rope_rotate(x, pos, cos_table, sin_table, N, heads, D, 1.0f, stream);
}

void rope_backward(float* dx, const int32_t* pos, const float* cos_table, const float* sin_table,
                   int N, int heads, int D, cudaStream_t stream) {
  rope_rotate(dx, pos, cos_table, sin_table, N, heads, D, -1.0f, stream);
}

}  // namespace kiln::cuda
