// SwiGLU on the GPU: h = silu(gate) * up (h F32 or BF16), and its backward.
#include <cuda_runtime.h>

#include "kiln/kernels/cuda/device_math.cuh"
#include "kiln/kernels/cuda/pointwise_ops.h"

namespace kiln::cuda {

namespace {
constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename TO>
__global__ void __launch_bounds__(kThreads)
    swiglu_forward_kernel(TO* h, const float* gate, const float* up, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    const float g = gate[i];
    store_f32(h, i, g * sigmoid(g) * up[i]);
  }
}

// d/dgate silu(g) * u = u * s * (1 + g * (1 - s)), d/dup = silu(g); s = sigmoid(g).
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(float* dgate, float* dup, const float* dh, const float* gate,
                           const float* up, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    const float g = gate[i];
    const float s = sigmoid(g);
    const float d = dh[i];
    const float u = up[i];
    dup[i] = d * g * s;
    dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
  }
}
}  // namespace

void swiglu_forward(DevPtr h, const float* gate, const float* up, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_dtype(h.dtype, "swiglu_forward output", [&](auto tag) {
    using TO = decltype(tag);
    swiglu_forward_kernel<TO>
        <<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<TO*>(h.data), gate, up, n);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                     size_t n, cudaStream_t stream) {
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dgate, dup, dh, gate, up,
                                                                         n);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
