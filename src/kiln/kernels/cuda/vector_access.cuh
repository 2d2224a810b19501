// float4 loads and stores for elementwise kernels: a kernel takes the vector path (quads, then
// the scalar tail) only when every array it touches is 16-byte aligned (aligned16 on the host).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kiln::cuda {

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__device__ __forceinline__ float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }

}  // namespace kiln::cuda
