// Buffers: 64-byte aligned, owning, typed storage. Shapes live in the code that uses them (each
// op's header states its shapes); a Buffer is just memory with a size.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>

namespace kiln {

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) { resize(n); }

  // Resizes without preserving contents; new memory is zeroed.
  void resize(size_t n) {
    if (n == size_) return;
    size_ = n;
    if (n == 0) {
      ptr_.reset();
      return;
    }
    size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    ptr_.reset(static_cast<T*>(p));
  }
  void zero() {
    if (size_) std::memset(ptr_.get(), 0, size_ * sizeof(T));
  }

  T* data() { return ptr_.get(); }
  const T* data() const { return ptr_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return ptr_.get()[i]; }
  const T& operator[](size_t i) const { return ptr_.get()[i]; }
  std::span<T> span() { return {data(), size_}; }
  std::span<const T> span() const { return {data(), size_}; }

 private:
  std::unique_ptr<T, AlignedFree> ptr_;
  size_t size_ = 0;
};

}  // namespace kiln
