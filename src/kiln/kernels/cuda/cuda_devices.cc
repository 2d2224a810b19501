#include "kiln/kernels/cuda/cuda_devices.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "kiln/base/error.h"
#include "kiln/kernels/cuda/cuda_check.h"

namespace kiln {

std::string no_gpu_reason(const std::string& runtime_error, bool driver_library_loads) {
  if (!driver_library_loads) return "no NVIDIA driver (libcuda.so.1 not found)";
  return runtime_error;
}

bool driver_library_loads() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

CudaDevices cuda_devices() {
  CudaDevices d;
  const cudaError_t e = cudaGetDeviceCount(&d.count);
  if (e != cudaSuccess) {
    d.count = 0;
    d.reason = no_gpu_reason(cudaGetErrorString(e), driver_library_loads());
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
  } else if (d.count == 0) {
    d.reason = "the CUDA runtime lists no device";
  }
  return d;
}

int cuda_use_device(int local_rank) {
  const CudaDevices d = cuda_devices();
  if (d.count == 0) fail("CUDA: no GPU visible ({})", d.reason);
  const int device = local_rank % d.count;
  KILN_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

}  // namespace kiln
