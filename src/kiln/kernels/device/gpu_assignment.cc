#include "kiln/kernels/device/gpu_assignment.h"

#include "kiln/base/error.h"

#ifdef KILN_HAVE_CUDA
#include "kiln/kernels/cuda/cuda_devices.h"
#endif

namespace kiln {

int visible_gpu_count(std::string* reason) {
#ifdef KILN_HAVE_CUDA
  const CudaDevices d = cuda_devices();
  if (reason != nullptr) *reason = d.reason;
  return d.count;
#else
  if (reason != nullptr) *reason = "this kiln was built without CUDA";
  return 0;
#endif
}

int use_gpu_of_rank(int local_rank) {
#ifdef KILN_HAVE_CUDA
  return cuda_use_device(local_rank);
#else
  fail("GPU for local rank {}: this kiln was built without CUDA", local_rank);
#endif
}

}  // namespace kiln
