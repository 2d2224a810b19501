// Pinned host buffers of a device backend, reused: the Gloo communicator stages device buffers
// through them (device -> pinned, Gloo on the pinned copy, pinned -> device). A buffer goes back
// to the pool when its last holder lets go, which may be a stream's host function (the copy back
// to the device has run): giving back only takes a lock, the backend frees nothing until the
// pool itself goes.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "kiln/kernels/ops.h"

namespace kiln {

class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  explicit PinnedPool(const Backend& backend) : backend_(backend) {}
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // At least `bytes` of pinned memory, back in the pool once the last copy of the pointer goes.
  std::shared_ptr<uint8_t> acquire(size_t bytes);

 private:
  struct Block {
    uint8_t* data;
    size_t bytes;
  };
  void give_back(Block b);

  const Backend& backend_;
  std::mutex mu_;
  std::vector<Block> free_;
};

}  // namespace kiln
