// Which GPU a rank uses, for the layers above kernels/ that must not name a backend's headers
// (the launcher picks the device and the communicator before the backend exists). Without CUDA
// in the build: no GPUs, and use_gpu_of_rank fails.
#pragma once

#include <string>

namespace kiln {

// The GPUs this process can see (0 without CUDA, or without a driver or device: `reason` says).
int visible_gpu_count(std::string* reason = nullptr);

// Makes GPU (local_rank % visible) the calling thread's current device; returns its index.
// kiln::Error when none is visible.
int use_gpu_of_rank(int local_rank);

}  // namespace kiln
