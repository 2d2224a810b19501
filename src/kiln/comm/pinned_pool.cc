#include "kiln/comm/pinned_pool.h"

#include <algorithm>

namespace kiln {

PinnedPool::~PinnedPool() {
  for (const Block& b : free_) backend_.free_pinned(b.data);
}

std::shared_ptr<uint8_t> PinnedPool::acquire(size_t bytes) {
  bytes = std::max<size_t>(bytes, 64);
  Block b{nullptr, 0};
  {
    std::lock_guard<std::mutex> l(mu_);
    // The smallest free block that fits: FSDP stages the same few sizes every step.
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->bytes >= bytes && (best == free_.end() || it->bytes < best->bytes)) best = it;
    }
    if (best != free_.end()) {
      b = *best;
      free_.erase(best);
    }
  }
  if (b.data == nullptr) b = Block{static_cast<uint8_t*>(backend_.alloc_pinned(bytes)), bytes};
  return std::shared_ptr<uint8_t>(b.data,
                                  [pool = shared_from_this(), b](uint8_t*) { pool->give_back(b); });
}

void PinnedPool::give_back(Block b) {
  std::lock_guard<std::mutex> l(mu_);
  free_.push_back(b);
}

}  // namespace kiln
