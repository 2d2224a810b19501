// Device memory owned through RAII: DeviceBuffer<T> (one allocation), DeviceArena (one
// allocation carved into the pieces of a plan: the model's activations and scratch, sized once
// per shape) and DevicePool (buffers by size, reused: FSDP's gathered units and gradients).
// All memory comes from a Backend; its contents are touched only by the backend's ops and
// copies, never by host code directly (the stream emulation catches a host access that skips its
// wait).
#pragma once

#include <cstddef>
#include <map>
#include <utility>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/kernels/ops.h"

namespace kiln {

// n elements of T on the backend's device, zero-filled on allocation (on the compute stream).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const Backend& be, size_t n) : be_(&be) { resize(n); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      be_ = o.be_;
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }

  // Reallocates (contents not kept) and zero-fills; a no-op when the size is unchanged.
  void resize(size_t n) {
    if (n == size_) return;
    KILN_CHECK(be_ != nullptr, "DeviceBuffer without a backend");
    release();
    if (n == 0) return;
    ptr_ = static_cast<T*>(be_->alloc(n * sizeof(T)));
    size_ = n;
    zero();
  }
  void zero() {
    if (size_) be_->fill_zero(ptr_, size_ * sizeof(T));
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  const Backend* backend() const { return be_; }

 private:
  void release() {
    if (ptr_ != nullptr) be_->free(ptr_);
    ptr_ = nullptr;
    size_ = 0;
  }
  const Backend* be_ = nullptr;
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

// n elements of T in pinned host memory (staging for copies to and from the device).
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const Backend& be, size_t n)
      : be_(&be), ptr_(static_cast<T*>(be.alloc_pinned(n * sizeof(T)))), size_(n) {}
  PinnedBuffer(PinnedBuffer&& o) noexcept { *this = std::move(o); }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_ != nullptr) be_->free_pinned(ptr_);
      be_ = o.be_;
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_ != nullptr) be_->free_pinned(ptr_);
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  const Backend* be_ = nullptr;
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

// Pieces of one allocation: plan them with add(&pointer, count), then allocate(); each pointer
// then points at its piece (64-byte aligned, zero-filled). Replanning frees the old allocation.
class DeviceArena {
 public:
  explicit DeviceArena(const Backend& be) : be_(be) {}
  template <typename T>
  void add(T** where, size_t n) {
    pieces_.push_back({reinterpret_cast<void**>(where), (n * sizeof(T) + 63) / 64 * 64});
  }
  // A piece of n elements of `dtype` (its storage type is the caller's).
  void add(void** where, size_t n, DType dtype) {
    pieces_.push_back({where, (n * dtype_size(dtype) + 63) / 64 * 64});
  }
  void allocate();
  size_t bytes() const { return memory_.size(); }

 private:
  struct Piece {
    void** where;
    size_t bytes;
  };
  const Backend& be_;
  std::vector<Piece> pieces_;
  DeviceBuffer<unsigned char> memory_;
};

// Floats of storage that n elements of `dtype` occupy (pooled buffers are float-typed; bf16
// units live in half as many).
inline size_t storage_floats(size_t n, DType dtype) {
  return (n * dtype_size(dtype) + sizeof(float) - 1) / sizeof(float);
}

// Buffers kept for reuse by exact size (FSDP asks for a handful of distinct sizes).
class DevicePool {
 public:
  explicit DevicePool(const Backend& be) : be_(be) {}
  // A buffer of n floats; contents undefined when reused (zero-filled when new).
  DeviceBuffer<float> take(size_t n);
  void give(DeviceBuffer<float> b);

 private:
  const Backend& be_;
  std::multimap<size_t, DeviceBuffer<float>> free_;
};

}  // namespace kiln
