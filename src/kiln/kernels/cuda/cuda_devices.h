// The GPUs this process can see, asked of the CUDA runtime (static cudart: on a machine without a
// driver the count is 0 and `reason` says why, e.g. "CUDA driver version is insufficient").
#pragma once

#include <string>

namespace kiln {

struct CudaDevices {
  int count = 0;
  std::string reason;  // why count is 0 ("" when GPUs are visible)
};
CudaDevices cuda_devices();

// Makes GPU (local_rank % count) this thread's current device (cudaSetDevice) and returns its
// index; kiln::Error when no GPU is visible.
int cuda_use_device(int local_rank);

}  // namespace kiln
