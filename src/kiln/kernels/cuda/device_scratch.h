// Scratch device memory an op keeps between calls (cast copies of GEMM operands, the LM head's
// chunk of logits, attention's backward scratch): grows on demand, never shrinks, freed with its
// owner. Ops on one stream reuse it in issue order, so one buffer serves every call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace kiln::cuda {

class DeviceScratch {
 public:
  DeviceScratch() = default;
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  // At least `bytes` of device memory (on the current device). Growing first waits for
  // `stream`: work enqueued earlier may still read the old buffer.
  void* get(size_t bytes, cudaStream_t stream);
  template <typename T>
  T* as(size_t n, cudaStream_t stream) {
    return static_cast<T*>(get(n * sizeof(T), stream));
  }
  size_t capacity() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kiln::cuda
