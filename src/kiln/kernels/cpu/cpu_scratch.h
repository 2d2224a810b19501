// Scratch the CPU backend's ops keep between calls, in the backend's own memory (alloc(), so
// memory_stats() counts it beside the model's buffers): grows to the largest request, never
// shrinks, freed with its owner. Contents are not kept across growth.
#pragma once

#include <cstddef>

#include "kiln/kernels/ops.h"

namespace kiln {

class CpuScratch {
 public:
  // `be` outlives the scratch (a backend's member: declared after the counter free() uses).
  explicit CpuScratch(const Backend& be) : be_(be) {}
  ~CpuScratch() {
    if (ptr_ != nullptr) be_.free(ptr_);
  }
  CpuScratch(const CpuScratch&) = delete;
  CpuScratch& operator=(const CpuScratch&) = delete;

  void* get(size_t bytes) {
    if (bytes <= bytes_) return ptr_;
    if (ptr_ != nullptr) be_.free(ptr_);
    ptr_ = nullptr;
    ptr_ = be_.alloc(bytes);
    bytes_ = bytes;
    return ptr_;
  }
  template <typename T>
  T* as(size_t bytes) {
    return static_cast<T*>(get(bytes));
  }

 private:
  const Backend& be_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kiln
