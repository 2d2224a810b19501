// kiln doctor, the CUDA backend probe: what this binary's own CUDA runtime, cuBLASLt
// (gpu_inventory(), kernels/) and NCCL report: they are linked in, so this is what
// `train.device=cuda` would use. Without a driver the static cudart still answers: no device,
// and why.
#include "kiln/doctor/doctor.h"
#include "kiln/kernels/device/gpu_inventory.h"

#if KILN_HAVE_CUDA
#include <nccl.h>
#endif

namespace kiln {

std::optional<CudaBackendProbe> probe_cuda_backend() {
  std::optional<GpuInventory> inv = gpu_inventory();
  if (!inv) return std::nullopt;
  CudaBackendProbe p;
  p.gpus = std::move(inv->gpus);
  p.no_gpu_reason = std::move(inv->no_gpu_reason);
  p.driver_version = inv->driver_version;
  p.runtime_version = inv->runtime_version;
  p.cublaslt_version = inv->cublaslt_version;
#if KILN_HAVE_CUDA
  if (ncclGetVersion(&p.nccl_version) != ncclSuccess) p.nccl_version = 0;
#endif
  return p;
}

}  // namespace kiln
