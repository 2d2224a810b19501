// Device helpers of the pointwise kernels (kernels/cuda/*.cu): bf16 storage, dtype dispatch,
// fixed-order block reductions and launch sizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/dtype_dispatch.h"
#include "kiln/kernels/ops.h"

namespace kiln::cuda {

// bf16 bit pattern of f, rounded to nearest even exactly as the CPU's to_bf16 (kernels/cpu/gemm.h)
// and vcvtneps2bf16: NaN kept quiet, denormals flushed to signed zero. __float2bfloat16_rn does
// not flush denormals, so it is not used: a bf16 activation must be the same on every backend.
__device__ __forceinline__ uint16_t bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float bf16_value(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

// Element i of an F32 (float) or BF16 (uint16_t bit patterns) array, as float; and a float
// stored into one (rounded to nearest even for bf16).
__device__ __forceinline__ float load_f32(const float* p, size_t i) { return p[i]; }
__device__ __forceinline__ float load_f32(const uint16_t* p, size_t i) { return bf16_value(p[i]); }
__device__ __forceinline__ void store_f32(float* p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_f32(uint16_t* p, size_t i, float v) { p[i] = bf16_bits(v); }

struct BlockMax {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct BlockPlus {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

// The reduction of v over the block (blockDim.x a multiple of 32), the same value in every
// thread: a butterfly within each warp, then over the warps' results in warp order. static: its
// __shared__ array is then a variable of each kernel file, which the CPU emulator bounds-checks.
template <typename T, typename Op>
static __device__ T block_all_reduce(T v, Op op, T identity) {
  __shared__ T warp_vals[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? warp_vals[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) warp_vals[0] = v;
  }
  __syncthreads();
  const T r = warp_vals[0];
  __syncthreads();  // warp_vals may be reused by the next call
  return r;
}

// Sum over the block of every thread's v, the same in every thread. The order is fixed by the
// block size (a compile-time constant of each kernel): butterfly within warps (lanes agree, as
// addition commutes), then the warps' sums in warp order. `shared` holds kThreads / 32 doubles.
template <int kThreads>
__device__ __forceinline__ double block_sum(double v, double* shared) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += shared[w];
  __syncthreads();  // shared may be reused once every thread has read it
  return total;
}

// Blocks of `threads` for a grid-stride loop over n items (capped: each thread loops).
inline unsigned grid_for(size_t n, unsigned threads) {
  constexpr size_t kMaxBlocks = size_t{1} << 16;
  const size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// Thread index and stride of a 1-D grid-stride loop.
__device__ __forceinline__ size_t grid_index() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t grid_stride() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

}  // namespace kiln::cuda

// After every launch: a bad configuration surfaces at the call, not at the next sync.
#define KILN_CUDA_CHECK_LAUNCH() KILN_CUDA_CHECK(cudaGetLastError())
