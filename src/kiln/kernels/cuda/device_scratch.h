// Scratch device memory an op keeps between calls (cast copies of GEMM operands, the LM head's
// chunk of logits, attention's backward scratch, cuBLASLt's workspace): grows on demand, never
// shrinks, freed with its owner. The memory is the owning backend's alloc(), so it counts in the
// backend's memory_stats() beside the model's own buffers. Ops on the backend's compute stream
// reuse it in issue order, so one buffer serves every call.
#pragma once

#include <cstddef>

#include "kiln/kernels/ops.h"

namespace kiln::cuda {

class DeviceScratch {
 public:
  // `be` outlives the scratch (a backend's member scratch: declared after what free() uses).
  explicit DeviceScratch(const Backend& be) : be_(&be) {}
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  // At least `bytes` of the backend's memory. Growing first waits for the compute stream: work
  // enqueued earlier may still read the old buffer.
  void* get(size_t bytes);
  template <typename T>
  T* as(size_t n) {
    return static_cast<T*>(get(n * sizeof(T)));
  }
  size_t capacity() const { return bytes_; }

  // Requests are rounded up to this, so slowly growing ones do not reallocate every call.
  static constexpr size_t kGranule = size_t{2} << 20;

 private:
  const Backend* be_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kiln::cuda
