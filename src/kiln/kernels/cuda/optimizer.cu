// The optimizer's updates on the GPU, elementwise over a shard: AdamW and SGD exactly as
// AdamWStep and SgdStep (kernels/ops.h) define them, in float4 steps when the arrays are
// 16-byte aligned.
#include <cuda_runtime.h>

#include "kiln/kernels/cuda/device_math.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/pointwise_ops.h"
#include "kiln/kernels/cuda/vector_access.cuh"

namespace kiln::cuda {

namespace {
constexpr int kThreads = 256;

__device__ __forceinline__ void adamw_one(float& p, float& m, float& v, float g,
                                          const AdamWStep& s) {
  m = s.beta1 * m + (1.0f - s.beta1) * g;
  v = s.beta2 * v + (1.0f - s.beta2) * g * g;
  p = p * s.decay - s.step_size * m / (sqrtf(v) * s.inv_sqrt_bc2 + s.eps);
}

// p, m, v, g: (n); quads first when kVec, then the scalar tail.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(float* p, float* m, float* v, const float* g, size_t n, AdamWStep s) {
  size_t i = grid_index();
  if constexpr (kVec) {
    const size_t quads = n / 4;
    for (; i < quads; i += grid_stride()) {
      float4 pq = load4(p + 4 * i), mq = load4(m + 4 * i), vq = load4(v + 4 * i);
      const float4 gq = load4(g + 4 * i);
      adamw_one(pq.x, mq.x, vq.x, gq.x, s);
      adamw_one(pq.y, mq.y, vq.y, gq.y, s);
      adamw_one(pq.z, mq.z, vq.z, gq.z, s);
      adamw_one(pq.w, mq.w, vq.w, gq.w, s);
      store4(p + 4 * i, pq);
      store4(m + 4 * i, mq);
      store4(v + 4 * i, vq);
    }
    i = 4 * quads + grid_index();
  }
  for (; i < n; i += grid_stride()) adamw_one(p[i], m[i], v[i], g[i], s);
}

// d = g + weight_decay * p; with momentum m = first ? d : momentum * m + d, d = m; p -= lr * d.
// m is null without momentum.
__global__ void __launch_bounds__(kThreads)
    sgd_kernel(float* p, float* m, const float* g, size_t n, SgdStep s) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    float d = g[i] + s.weight_decay * p[i];
    if (s.momentum > 0) {
      const float mi = s.first ? d : s.momentum * m[i] + d;
      m[i] = mi;
      d = mi;
    }
    p[i] -= s.lr * d;
  }
}
}  // namespace

void adamw_step(float* p, float* m, float* v, const float* g, size_t n, const AdamWStep& s,
                cudaStream_t stream) {
  if (n == 0) return;
  if (aligned16(p) && aligned16(m) && aligned16(v) && aligned16(g)) {
    KILN_LAUNCH(grid_for(n / 4 + 1, kThreads), kThreads, 0, stream, adamw_kernel<true>)
    (p, m, v, g, n, s);
  } else {
    KILN_LAUNCH(grid_for(n, kThreads), kThreads, 0, stream, adamw_kernel<false>)(p, m, v, g, n, s);
  }
  KILN_CUDA_CHECK_LAUNCH();
}

void sgd_step(float* p, float* m, const float* g, size_t n, const SgdStep& s, cudaStream_t stream) {
  if (n == 0) return;
  KILN_LAUNCH(grid_for(n, kThreads), kThreads, 0, stream, sgd_kernel)(p, m, g, n, s);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
