#include "kiln/kernels/cuda/device_scratch.h"

namespace kiln::cuda {

DeviceScratch::~DeviceScratch() {
  if (ptr_ == nullptr) return;
  try {
    be_->free(ptr_);
  } catch (...) {
    // A destructor must not throw; the next checked call reports the device's error.
  }
}

void* DeviceScratch::get(size_t bytes) {
  if (bytes <= bytes_) return ptr_;
  if (ptr_ != nullptr) {
    be_->synchronize();
    void* old = ptr_;
    ptr_ = nullptr;
    bytes_ = 0;
    be_->free(old);
  }
  const size_t rounded = (bytes + kGranule - 1) / kGranule * kGranule;
  ptr_ = be_->alloc(rounded);
  bytes_ = rounded;
  return ptr_;
}

}  // namespace kiln::cuda
