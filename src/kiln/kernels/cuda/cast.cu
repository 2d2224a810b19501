// fp32 <-> bf16 on the GPU (FSDP's gathered parameters): rounding to nearest even exactly as
// the CPU's to_bf16, so a bf16 copy is the same bits on every backend.
#include <cuda_runtime.h>

#include "kiln/kernels/cuda/device_math.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/pointwise_ops.h"

namespace kiln::cuda {

namespace {
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    cast_f32_to_bf16_kernel(uint16_t* dst, const float* src, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) dst[i] = bf16_bits(src[i]);
}

__global__ void __launch_bounds__(kThreads)
    cast_bf16_to_f32_kernel(float* dst, const uint16_t* src, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) dst[i] = bf16_value(src[i]);
}
}  // namespace

void cast_f32_to_bf16(uint16_t* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  KILN_LAUNCH(grid_for(n, kThreads), kThreads, 0, stream, cast_f32_to_bf16_kernel)(dst, src, n);
  KILN_CUDA_CHECK_LAUNCH();
}

void cast_bf16_to_f32(float* dst, const uint16_t* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  KILN_LAUNCH(grid_for(n, kThreads), kThreads, 0, stream, cast_bf16_to_f32_kernel)(dst, src, n);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
