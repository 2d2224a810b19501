// Bytes of device memory a backend has handed out through alloc(): in use now and the peak, for
// the benchmarks' and the trainer's device-memory figures. Thread-safe (the stream emulation
// frees on its worker thread).
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>

namespace kiln {

struct DeviceMemoryStats {
  size_t in_use = 0;  // bytes allocated and not yet freed
  size_t peak = 0;    // the high-water mark of in_use
};

class MemoryCounter {
 public:
  void allocated(const void* p, size_t bytes) {
    std::lock_guard lock(mu_);
    sizes_[p] = bytes;
    stats_.in_use += bytes;
    if (stats_.in_use > stats_.peak) stats_.peak = stats_.in_use;
  }
  void freed(const void* p) {
    std::lock_guard lock(mu_);
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    stats_.in_use -= it->second;
    sizes_.erase(it);
  }
  DeviceMemoryStats stats() const {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<const void*, size_t> sizes_;
  DeviceMemoryStats stats_;
};

}  // namespace kiln
