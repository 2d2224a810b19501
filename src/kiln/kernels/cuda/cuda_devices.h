// The GPUs this process can see, asked of the CUDA runtime (static cudart: on a machine without a
// driver the count is 0 and `reason` says why). The runtime says "CUDA driver version is
// insufficient for CUDA runtime version" both for an old driver and for none at all; the reason
// tells them apart by whether the driver's library (libcuda.so.1) can be loaded.
#pragma once

#include <string>

namespace kiln {

struct CudaDevices {
  int count = 0;
  std::string reason;  // why count is 0 ("" when GPUs are visible)
};
CudaDevices cuda_devices();

// The reason no GPU is visible, from the runtime's error message and whether libcuda.so.1 loads:
// "no NVIDIA driver (libcuda.so.1 not found)" when it does not, else the runtime's message.
std::string no_gpu_reason(const std::string& runtime_error, bool driver_library_loads);
// Whether the dynamic loader finds the NVIDIA driver's libcuda.so.1.
bool driver_library_loads();

// Makes GPU (local_rank % count) this thread's current device (cudaSetDevice) and returns its
// index; kiln::Error when no GPU is visible.
int cuda_use_device(int local_rank);

}  // namespace kiln
