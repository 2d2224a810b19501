#include "kiln/kernels/device/backend.h"

#include <cstdlib>
#include <cstring>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/kernels/cpu/async_cpu_backend.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/gemm.h"

#ifdef KILN_HAVE_CUDA
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/cuda_devices.h"
#endif

namespace kiln {

const float* ConstDevPtr::f32() const {
  KILN_CHECK(dtype == DType::F32, "expected an F32 device pointer, got {}", dtype_name(dtype));
  return static_cast<const float*>(data);
}

bool async_cpu_requested() {
  const char* v = std::getenv("KILN_ASYNC_CPU");
  return v != nullptr && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

int local_rank_from_env() {
  const char* v = std::getenv("LOCAL_RANK");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long r = std::strtol(v, &end, 10);
  if (*end != '\0' || r < 0 || r > 1 << 20) fail("LOCAL_RANK: '{}' is not a local rank", v);
  return static_cast<int>(r);
}

namespace {
std::unique_ptr<Backend> make_cpu_backend(ComputeDType dtype) {
  const bool bf16 = dtype == ComputeDType::kBf16;
  if (bf16) gemm_bf16_native();  // decides once, and warns once where bf16 falls back to fp32
  if (async_cpu_requested()) return make_async_cpu_backend(bf16);
  return std::make_unique<CpuBackend>(bf16);
}
}  // namespace

#ifdef KILN_HAVE_CUDA
std::unique_ptr<Backend> make_backend(DeviceRequest device, ComputeDType dtype, int local_rank) {
  if (device == DeviceRequest::kCpu) return make_cpu_backend(dtype);
  const CudaDevices gpus = cuda_devices();
  if (gpus.count == 0) {
    if (device == DeviceRequest::kCuda)
      fail("train.device: cuda: no GPU visible ({})", gpus.reason);
    // Debug only: every command makes a backend; the trainer's start-up line gives the notice.
    KILN_LOG_DEBUG("train.device=auto: no GPU visible ({}); training on the CPU", gpus.reason);
    return make_cpu_backend(dtype);
  }
  const int rank = local_rank == kLocalRankFromEnv ? local_rank_from_env() : local_rank;
  return std::make_unique<CudaBackend>(dtype, cuda_use_device(rank));
}
#else
std::unique_ptr<Backend> make_backend(DeviceRequest device, ComputeDType dtype,
                                      int /*local_rank*/) {
  if (device == DeviceRequest::kCuda) {
    fail(
        "train.device: cuda: this kiln was built without a CUDA backend (use train.device=cpu or "
        "auto)");
  }
  if (device == DeviceRequest::kAuto) {
    KILN_LOG_DEBUG("train.device=auto: no CUDA backend in this build; training on the CPU");
  }
  return make_cpu_backend(dtype);
}
#endif

}  // namespace kiln
