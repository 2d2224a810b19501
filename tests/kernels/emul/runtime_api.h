// The part of the CUDA runtime API that kiln's kernel sources (src/kiln/kernels/cuda/*.cu) use,
// as the CPU emulator provides it: vector types, launch dimensions, streams (placeholders: the
// emulator runs a launch to its end before the launch call returns), errors (a kernel's fault
// is sticky, as a device fault is), device memory (host memory registered with the emulator, so
// its bounds are checked) and the function attribute the flash kernels set. Reached through the
// emulator's <cuda_runtime_api.h> (shim/), never together with the CUDA toolkit's.
//
// The names are the toolkit's and live in the global namespace with C++ linkage, so they never
// collide with libcudart's C symbols when a CUDA build links both.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;
using cudaStream_t = CUstream_st*;

enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorLaunchFailure = 719,
};

enum cudaFuncAttribute : int {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};

enum cudaMemcpyKind : int {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr : int {
  cudaDevAttrMemoryPoolsSupported = 115,
};

struct CUmemPoolHandle_st;
using cudaMemPool_t = CUmemPoolHandle_st*;
enum cudaMemPoolAttr : int {
  cudaMemPoolAttrReleaseThreshold = 4,
};

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}  // NOLINT: implicit, as CUDA's
};

struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }

// The last error (a kernel fault or a bad launch), cleared by cudaGetLastError unless a kernel
// faulted (then every later call reports it, until the emulator's fault is taken by a test).
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t e);

// Device memory: host memory filled with 0xff bytes (NaN, -1) as fresh device memory is
// undefined, registered with the emulator until freed.
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
// The emulated device has a stream-ordered pool (cudaMallocAsync); its attributes are accepted.
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaDeviceSynchronize();

template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
template <typename T>
cudaError_t cudaMallocAsync(T** p, size_t bytes, cudaStream_t stream) {
  return cudaMallocAsync(reinterpret_cast<void**>(p), bytes, stream);
}

namespace kiln::emul {
cudaError_t set_function_attribute(const void* kernel, cudaFuncAttribute attr, int value);
}  // namespace kiln::emul

// The largest dynamic shared memory a kernel may be launched with (above 48 KiB only once set).
template <typename F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
  return kiln::emul::set_function_attribute(reinterpret_cast<const void*>(kernel), attr, value);
}
