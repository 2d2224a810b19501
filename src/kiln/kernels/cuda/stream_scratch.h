// Scratch device memory for one op's intermediate results (a reduction's partial sums). Where the
// device has a stream-ordered pool (cudaDevAttrMemoryPoolsSupported), a StreamScratch is taken
// from it (cudaMallocAsync) and given back on the same stream, so it lives exactly as long as the
// kernels enqueued between; the pool's release threshold is raised once (prepare_stream_pool) so
// that a synchronisation does not hand its memory back to the driver and the next step pay the
// allocation again. Without a pool (some virtualised or older setups), every StreamScratch of a
// backend is one persistent buffer that grows to the largest request (one at a time). Either way
// the bytes count in the backend's memory statistics.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kiln/kernels/cuda/device_scratch.h"
#include "kiln/kernels/device/memory_counter.h"

namespace kiln::cuda {

// Whether `device` has a stream-ordered pool; if it does, its default pool keeps what it was
// given back (release threshold: unlimited) instead of trimming at every synchronisation.
bool prepare_stream_pool(int device);

class StreamScratchPool {
 public:
  // be, counter: the backend whose memory statistics count the scratch (they outlive the pool).
  StreamScratchPool(const Backend& be, MemoryCounter& counter, bool stream_ordered)
      : counter_(counter), persistent_(be), stream_ordered_(stream_ordered) {}
  bool stream_ordered() const { return stream_ordered_; }

 private:
  friend class StreamScratch;
  MemoryCounter& counter_;
  DeviceScratch persistent_;  // without a pool
  bool stream_ordered_;
  bool persistent_taken_ = false;
};

class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t stream, StreamScratchPool& pool);
  // Gives the memory back; an error is left for the next check (a destructor must not throw).
  ~StreamScratch();
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  // Gives the memory back now (on the stream, after the kernels enqueued so far), checked.
  void release();

 private:
  StreamScratchPool& pool_;
  cudaStream_t stream_;
  void* ptr_ = nullptr;
};

}  // namespace kiln::cuda
