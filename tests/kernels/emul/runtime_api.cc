// The emulator's CUDA runtime API (runtime_api.h): device memory is host memory, registered.
#include "kernels/emul/runtime_api.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "kernels/emul/device_state.h"
#include "kiln/base/error.h"

namespace kiln::emul {

namespace {
constexpr size_t kRedzone = 64;  // bytes after every buffer that belong to no one
constexpr size_t kAlign = 256;   // cudaMalloc's alignment

int next_buffer_id() {
  static int id = 0;
  return ++id;
}
}  // namespace

void* device_alloc(size_t bytes, const std::string& name) {
  if (Device::get().dry_run()) return Device::get().fake_alloc(bytes, false);
  const size_t total = (bytes + kRedzone + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, total);
  if (p == nullptr) return nullptr;
  std::memset(p, 0xff, total);  // fresh device memory is undefined: NaN, -1
  Device& d = Device::get();
  const std::string label =
      name.empty() ? fmt::format("#{}", next_buffer_id()) : fmt::format("'{}'", name);
  d.memory().add(RegionKind::kGlobal, p, bytes, total - bytes, label);
  return p;
}

void device_free(void* p) {
  if (p == nullptr || Device::get().is_fake(p)) return;
  Device::get().memory().remove(p);
  std::free(p);
}

cudaError_t set_function_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
  Device& d = Device::get();
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      static_cast<size_t>(value) > kMaxDynamicSharedBytes) {
    d.api_error(cudaErrorInvalidValue,
                fmt::format("cudaFuncSetAttribute: attribute {} value {} (at most {} bytes of "
                            "dynamic shared memory on sm_89)",
                            static_cast<int>(attr), value, kMaxDynamicSharedBytes));
    return cudaErrorInvalidValue;
  }
  d.set_max_dynamic_shared(kernel, value);
  return cudaSuccess;
}

}  // namespace kiln::emul

namespace kiln {
// KILN_CUDA_CHECK's failure (cuda_check.h), for the emulated sources: the fault's own text.
[[noreturn]] void cuda_failed(cudaError_t e, const char* call, const char* file, int line) {
  fail("{} failed at {}:{}: {} ({})", call, file, line, cudaGetErrorString(e),
       emul::Device::get().fault_text());
}
}  // namespace kiln

using kiln::emul::Device;

cudaError_t cudaGetLastError() { return Device::get().last_error(true); }
cudaError_t cudaPeekAtLastError() { return Device::get().last_error(false); }

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure (emulator fault)";
  }
  return "unknown error";
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  Device& d = Device::get();
  *p = d.dry_run() ? d.fake_alloc(bytes, true) : kiln::emul::device_alloc(bytes, "");
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
  kiln::emul::device_free(p);
  return cudaSuccess;
}
// Stream order is issue order here (every launch has finished when its call returns).
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) { return cudaMalloc(p, bytes); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) {
  if (Device::get().is_fake(p)) return cudaSuccess;
  std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t) {
  const Device& d = Device::get();
  if (d.is_fake(dst)) return cudaSuccess;
  if (d.is_fake(src)) {
    std::memset(dst, 0, bytes);  // a dry run's device memory reads as zeros
    return cudaSuccess;
  }
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  *value = attr == cudaDevAttrMemoryPoolsSupported ? 1 : 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int) {
  *pool = nullptr;
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return Device::get().last_error(false); }
cudaError_t cudaDeviceSynchronize() { return Device::get().last_error(false); }
