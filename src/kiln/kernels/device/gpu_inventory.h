// The GPUs and GPU libraries this build's GPU backend sees (kiln doctor's `backend` line),
// without naming the backend above kernels/. In a build without the CUDA backend: nullopt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

// One GPU as the backend's runtime sees it (CUDA: cudaGetDeviceProperties).
struct VisibleGpu {
  int index = 0;
  std::string name;           // "NVIDIA H200"
  uint64_t memory_bytes = 0;  // total device memory
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
};

// Versions are the libraries' own integers (CUDA: 1000 * major + 10 * minor).
struct GpuInventory {
  std::vector<VisibleGpu> gpus;
  std::string no_gpu_reason;  // why `gpus` is empty ("" when GPUs are visible)
  int driver_version = 0;     // cudaDriverGetVersion: 0 without a driver
  int runtime_version = 0;    // cudaRuntimeGetVersion of the linked (static) runtime
  uint64_t cublaslt_version = 0;
};

// Asks the linked runtime; never throws. nullopt: this build has no GPU backend.
std::optional<GpuInventory> gpu_inventory();

}  // namespace kiln
