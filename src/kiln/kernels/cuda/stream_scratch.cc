#include "kiln/kernels/cuda/stream_scratch.h"

#include <cstdint>

#include "kiln/base/error.h"
#include "kiln/kernels/cuda/cuda_check.h"

namespace kiln::cuda {

bool prepare_stream_pool(int device) {
  int supported = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device));
  if (supported == 0) return false;
  cudaMemPool_t pool = nullptr;
  KILN_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t keep_all = UINT64_MAX;
  KILN_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  return true;
}

StreamScratch::StreamScratch(size_t bytes, cudaStream_t stream, StreamScratchPool& pool)
    : pool_(pool), stream_(stream) {
  if (pool.stream_ordered_) {
    KILN_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
    pool.counter_.allocated(ptr_, bytes);
    return;
  }
  KILN_CHECK(!pool.persistent_taken_,
             "StreamScratch: the persistent scratch (no stream-ordered pool) is already in use");
  ptr_ = pool.persistent_.get(bytes);
  pool.persistent_taken_ = true;
}

StreamScratch::~StreamScratch() {
  if (ptr_ == nullptr) return;
  if (pool_.stream_ordered_) {
    pool_.counter_.freed(ptr_);
    static_cast<void>(cudaFreeAsync(ptr_, stream_));
  } else {
    pool_.persistent_taken_ = false;
  }
}

void StreamScratch::release() {
  void* p = ptr_;
  ptr_ = nullptr;
  if (p == nullptr) return;
  if (!pool_.stream_ordered_) {
    pool_.persistent_taken_ = false;  // kept for the next op, which follows on the stream
    return;
  }
  pool_.counter_.freed(p);
  KILN_CUDA_CHECK(cudaFreeAsync(p, stream_));
}

}  // namespace kiln::cuda
