// Token embedding on the GPU: the forward gathers rows of wte (F32 or BF16); the backward adds
// dout rows into dwte without float atomics, repeated ids in token order.
#include <cuda_runtime.h>

#include "kiln/kernels/cuda/device_math.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/pointwise_ops.h"

namespace kiln::cuda {

namespace {
constexpr int kThreads = 256;

// One block per token: out (N, C) row n = wte (V, C) row ids[n].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    embedding_forward_kernel(float* out, const int32_t* ids, const T* wte, int C) {
  const size_t n = blockIdx.x;
  const size_t row = static_cast<size_t>(ids[n]) * C;
  for (int c = threadIdx.x; c < C; c += kThreads) out[n * C + c] = load_f32(wte, row + c);
}

// One block per token: out row n = the elements of wte row ids[n] that lie in the slice
// [begin, begin + len) of the flattened table, 0 elsewhere.
__global__ void __launch_bounds__(kThreads)
    embedding_forward_part_kernel(float* out, const int32_t* ids, const float* part, size_t begin,
                                  size_t len, int C, bool round_bf16) {
  const size_t n = blockIdx.x;
  const size_t row = static_cast<size_t>(ids[n]) * C;
  for (int c = threadIdx.x; c < C; c += kThreads) {
    const size_t e = row + c;
    float v = e >= begin && e < begin + len ? part[e - begin] : 0.0f;
    if (round_bf16) v = bf16_value(bf16_bits(v));
    out[n * C + c] = v;
  }
}

// Each thread owns column c of the ids in one bucket (id % kIdBuckets == blockIdx.y) and walks
// every token in order: a row of dwte is only ever touched by the threads of its bucket, each
// column by one thread, so repeated ids add in token order with no race and no atomics. The
// buckets multiply the parallelism over C alone. The block stages the ids in shared memory, a
// tile of kColumnsPerBlock tokens at a time.
constexpr int kIdBuckets = 16;
constexpr int kColumnsPerBlock = 128;

__global__ void __launch_bounds__(kColumnsPerBlock)
    embedding_backward_kernel(float* dpart, const float* dout, const int32_t* ids, int N, int C,
                              size_t begin, size_t len) {
  __shared__ int32_t tile[kColumnsPerBlock];
  const int c = blockIdx.x * kColumnsPerBlock + threadIdx.x;
  const int bucket = static_cast<int>(blockIdx.y);
  for (int n0 = 0; n0 < N; n0 += kColumnsPerBlock) {
    const int count = min(kColumnsPerBlock, N - n0);
    if (static_cast<int>(threadIdx.x) < count) tile[threadIdx.x] = ids[n0 + threadIdx.x];
    __syncthreads();
    if (c < C) {
      for (int j = 0; j < count; ++j) {
        const int32_t id = tile[j];
        if (id % kIdBuckets != bucket) continue;
        // Wraps above len when the element lies below the slice.
        const size_t at = static_cast<size_t>(id) * C + c - begin;
        if (at < len) dpart[at] += dout[static_cast<size_t>(n0 + j) * C + c];
      }
    }
    __syncthreads();  // the tile is reloaded only once every thread has walked it
  }
}
}  // namespace

void embedding_forward(float* out, const int32_t* ids, ConstDevPtr wte, int N, int C,
                       cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  with_dtype(wte.dtype, "embedding_forward", [&](auto tag) {
    using T = decltype(tag);
    KILN_LAUNCH(N, kThreads, 0, stream, embedding_forward_kernel<T>)
    (out, ids, static_cast<const T*>(wte.data), C);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void embedding_forward_part(float* out, const int32_t* ids, const float* part, size_t part_begin,
                            size_t part_len, int N, int C, bool round_bf16, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  KILN_LAUNCH(N, kThreads, 0, stream, embedding_forward_part_kernel)
  (out, ids, part, part_begin, part_len, C, round_bf16);
  KILN_CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dpart, const float* dout, const int32_t* ids, size_t part_begin,
                        size_t part_len, int N, int C, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  const dim3 grid((C + kColumnsPerBlock - 1) / kColumnsPerBlock, kIdBuckets);
  KILN_LAUNCH(grid, kColumnsPerBlock, 0, stream, embedding_backward_kernel)
  (dpart, dout, ids, N, C, part_begin, part_len);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
