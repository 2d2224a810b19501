#include "kiln/kernels/device/gpu_inventory.h"

#if KILN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kiln/base/error.h"
#include "kiln/kernels/cuda/cublaslt_library.h"
#include "kiln/kernels/cuda/cuda_devices.h"
#endif

namespace kiln {

#if KILN_HAVE_CUDA

namespace {

// The visible GPUs' properties; a device whose properties cannot be read is skipped.
std::vector<VisibleGpu> gpu_properties(int count) {
  std::vector<VisibleGpu> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    out.push_back({i, prop.name, static_cast<uint64_t>(prop.totalGlobalMem), prop.major, prop.minor,
                   prop.multiProcessorCount});
  }
  return out;
}

}  // namespace

std::optional<GpuInventory> gpu_inventory() {
  GpuInventory inv;
  const CudaDevices devices = cuda_devices();
  inv.no_gpu_reason = devices.reason;
  inv.gpus = gpu_properties(devices.count);
  if (devices.count > 0 && inv.gpus.empty()) inv.no_gpu_reason = "cudaGetDeviceProperties failed";
  if (cudaDriverGetVersion(&inv.driver_version) != cudaSuccess) inv.driver_version = 0;
  if (cudaRuntimeGetVersion(&inv.runtime_version) != cudaSuccess) inv.runtime_version = 0;
  cudaGetLastError();
  try {
    inv.cublaslt_version = static_cast<uint64_t>(cublaslt().cublasLtGetVersion());
  } catch (const Error&) {
    inv.cublaslt_version = 0;  // the library cannot be opened: doctor shows no version
  }
  return inv;
}

#else

std::optional<GpuInventory> gpu_inventory() { return std::nullopt; }

#endif

}  // namespace kiln
