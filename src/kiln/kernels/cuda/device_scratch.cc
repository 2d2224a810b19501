#include "kiln/kernels/cuda/device_scratch.h"

#include "kiln/kernels/cuda/cuda_check.h"

namespace kiln::cuda {

DeviceScratch::~DeviceScratch() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

void* DeviceScratch::get(size_t bytes, cudaStream_t stream) {
  if (bytes <= bytes_) return ptr_;
  if (ptr_ != nullptr) {
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
    KILN_CUDA_CHECK(cudaFree(ptr_));
    ptr_ = nullptr;
    bytes_ = 0;
  }
  // Rounded up to 2 MiB so that slowly growing requests do not reallocate every call.
  constexpr size_t kGranule = size_t{2} << 20;
  const size_t rounded = (bytes + kGranule - 1) / kGranule * kGranule;
  KILN_CUDA_CHECK(cudaMalloc(&ptr_, rounded));
  bytes_ = rounded;
  return ptr_;
}

}  // namespace kiln::cuda
