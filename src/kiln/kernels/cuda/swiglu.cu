// SwiGLU on the GPU: h = silu(gate) * up (h F32 or BF16) over the fused gate/up product's
// output, and its backward.
#include <cuda_runtime.h>

#include "kiln/kernels/cuda/device_math.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/pointwise_ops.h"

namespace kiln::cuda {

namespace {
constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// gate_up (N, 2I): row n is [gate | up]; h and dh (N, I). Thread i handles h[i], i = n * I + j.
template <typename TO>
__global__ void __launch_bounds__(kThreads)
    swiglu_forward_kernel(TO* h, const float* gate_up, size_t n_rows, unsigned cols) {
  const size_t total = n_rows * cols;
  for (size_t i = grid_index(); i < total; i += grid_stride()) {
    const size_t gi = i + (i / cols) * cols;  // gate's index in gate_up; up's is gi + cols
    const float g = gate_up[gi];
    store_f32(h, i, g * sigmoid(g) * gate_up[gi + cols]);
  }
}

// d/dgate silu(g) * u = u * s * (1 + g * (1 - s)), d/dup = silu(g); s = sigmoid(g).
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(float* dgate_up, const float* dh, const float* gate_up, size_t n_rows,
                           unsigned cols) {
  const size_t total = n_rows * cols;
  for (size_t i = grid_index(); i < total; i += grid_stride()) {
    const size_t gi = i + (i / cols) * cols;
    const float g = gate_up[gi];
    const float s = sigmoid(g);
    const float d = dh[i];
    dgate_up[gi + cols] = d * g * s;
    dgate_up[gi] = d * gate_up[gi + cols] * s * (1.0f + g * (1.0f - s));
  }
}
}  // namespace

void swiglu_forward(DevPtr h, const float* gate_up, int N, int I, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(N) * I;
  if (n == 0) return;
  with_dtype(h.dtype, "swiglu_forward output", [&](auto tag) {
    using TO = decltype(tag);
    KILN_LAUNCH(grid_for(n, kThreads), kThreads, 0, stream, swiglu_forward_kernel<TO>)
    (static_cast<TO*>(h.data), gate_up, static_cast<size_t>(N), static_cast<unsigned>(I));
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(float* dgate_up, const float* dh, const float* gate_up, int N, int I,
                     cudaStream_t stream) {
  const size_t n = static_cast<size_t>(N) * I;
  if (n == 0) return;
  KILN_LAUNCH(grid_for(n, kThreads), kThreads, 0, stream, swiglu_backward_kernel)
  (dgate_up, dh, gate_up, static_cast<size_t>(N), static_cast<unsigned>(I));
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
