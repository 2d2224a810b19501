// Inverted dropout on the GPU (Backend::dropout): each thread redraws its elements' keep bits
// from dropout_mask.h's hash of (seed, offset + i), the function the CPU calls, so the mask is
// the CPU's bit for bit and nothing is stored between the forward and the backward.
#include <cuda_runtime.h>

#include "kiln/kernels/cuda/device_math.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/pointwise_ops.h"
#include "kiln/kernels/dropout_mask.h"

namespace kiln::cuda {

namespace {
constexpr int kThreads = 256;

// out (n) = x / (1 - p) where kept, else 0; TI, TO: float (F32) or uint16_t (BF16 bits).
template <typename TI, typename TO>
__global__ void __launch_bounds__(kThreads)
    dropout_kernel(TO* out, const TI* x, size_t n, DropoutMask m) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    store_f32(out, i, dropout_value(m, i, load_f32(x, i)));
  }
}
}  // namespace

void dropout(DevPtr out, ConstDevPtr x, size_t n, float p, uint64_t seed, uint64_t offset,
             cudaStream_t stream) {
  const DropoutMask m = dropout_mask_for(p, seed, offset);
  if (n == 0) return;
  with_dtype(x.dtype, "dropout input", [&](auto in_tag) {
    with_dtype(out.dtype, "dropout output", [&](auto out_tag) {
      using TI = decltype(in_tag);
      using TO = decltype(out_tag);
      KILN_LAUNCH(grid_for(n, kThreads), kThreads, 0, stream, dropout_kernel<TI, TO>)
      (static_cast<TO*>(out.data), static_cast<const TI*>(x.data), n, m);
    });
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
