// kiln doctor, the CUDA backend probe: what this binary's own CUDA runtime, cuBLASLt and NCCL
// report (they are linked in, so this is what `train.device=cuda` would use). Without a driver
// the static cudart still answers: no device, and why (cuda_devices()).
#include "kiln/launch/doctor.h"

#if KILN_HAVE_CUDA
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "kiln/kernels/cuda/cuda_devices.h"
#endif

namespace kiln {

#if KILN_HAVE_CUDA

namespace {

// The visible GPUs' properties; a device whose properties cannot be read is skipped.
std::vector<CudaGpu> gpu_properties(int count) {
  std::vector<CudaGpu> out;
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

std::optional<CudaBackendProbe> probe_cuda_backend() {
  CudaBackendProbe p;
  const CudaDevices devices = cuda_devices();
  p.no_gpu_reason = devices.reason;
  p.gpus = gpu_properties(devices.count);
  if (devices.count > 0 && p.gpus.empty()) p.no_gpu_reason = "cudaGetDeviceProperties failed";
  if (cudaDriverGetVersion(&p.driver_version) != cudaSuccess) p.driver_version = 0;
  if (cudaRuntimeGetVersion(&p.runtime_version) != cudaSuccess) p.runtime_version = 0;
  cudaGetLastError();
  p.cublaslt_version = static_cast<uint64_t>(cublasLtGetVersion());
  if (ncclGetVersion(&p.nccl_version) != ncclSuccess) p.nccl_version = 0;
  return p;
}

#else

std::optional<CudaBackendProbe> probe_cuda_backend() { return std::nullopt; }

#endif

}  // namespace kiln
