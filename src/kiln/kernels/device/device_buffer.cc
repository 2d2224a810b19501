#include "kiln/kernels/device/device_buffer.h"

namespace kiln {

void DeviceArena::allocate() {
  size_t total = 0;
  for (const Piece& p : pieces_) total += p.bytes;
  // The old allocation goes first: held across the new one, a replan (a preference step's first
  // forward-only pass, then its training pass) would peak at both.
  memory_ = DeviceBuffer<unsigned char>();
  memory_ = DeviceBuffer<unsigned char>(be_, total);
  unsigned char* at = memory_.data();
  for (const Piece& p : pieces_) {
    *p.where = p.bytes > 0 ? at : nullptr;
    at += p.bytes;
  }
  pieces_.clear();
}

DeviceBuffer<float> DevicePool::take(size_t n) {
  auto it = free_.find(n);
  if (it == free_.end()) return DeviceBuffer<float>(be_, n);
  DeviceBuffer<float> b = std::move(it->second);
  free_.erase(it);
  return b;
}

void DevicePool::give(DeviceBuffer<float> b) {
  if (b.size() > 0) free_.emplace(b.size(), std::move(b));
}

}  // namespace kiln
