// Scratch device memory for one op's intermediate results (a reduction's partial sums), taken
// from the stream-ordered pool (cudaMallocAsync) and given back on the same stream, so it lives
// exactly as long as the kernels enqueued between.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kiln/kernels/cuda/cuda_check.h"

namespace kiln::cuda {

class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    KILN_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
  }
  // Frees on the stream; an error is left for the next check (a destructor must not throw).
  ~StreamScratch() {
    if (ptr_ != nullptr) static_cast<void>(cudaFreeAsync(ptr_, stream_));
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  // Frees on the stream now, checked.
  void release() {
    void* p = ptr_;
    ptr_ = nullptr;
    KILN_CUDA_CHECK(cudaFreeAsync(p, stream_));
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace kiln::cuda
