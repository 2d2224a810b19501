#include "kernels/emul/access_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "kernels/emul/device_state.h"

namespace kiln::emul {

namespace {

const char* verb(Access k) {
  return k == Access::kRead ? "read" : k == Access::kWrite ? "write" : "atomic";
}

// "thread (x,y,z)" of this block or "block (x,y,z) thread (x,y,z)" of another.
std::string thread_name(const BlockRun& b, uint32_t id) {
  const LaunchRun& l = b.launch();
  const uint32_t block = id / static_cast<uint32_t>(l.threads);
  const uint3 t = b.thread_index(static_cast<int>(id % static_cast<uint32_t>(l.threads)));
  const std::string th = fmt::format("thread ({},{},{})", t.x, t.y, t.z);
  if (block == b.global_thread(0) / static_cast<uint32_t>(l.threads)) return th;
  return fmt::format("block ({},{},{}) {}", block % l.grid.x, block / l.grid.x % l.grid.y,
                     block / (l.grid.x * l.grid.y), th);
}

[[noreturn]] void stray(BlockRun& b, int t, uintptr_t addr, size_t bytes, Access kind) {
  const MemoryMap& m = Device::get().memory();
  const Region* lo = m.below(addr);
  const Region* hi = m.above(addr);
  std::string near;
  if (lo != nullptr) near += "; nearest below: " + describe_offset(*lo, addr);
  if (hi != nullptr) near += "; nearest above: " + describe_offset(*hi, addr);
  const std::string who =
      t == b.current_thread() ? "" : fmt::format(" (for {})", thread_name(b, b.global_thread(t)));
  if (image_part(addr) == ImagePart::kWritable) {
    b.fault(
        fmt::format("{}-byte {} at {:#x}{}: a static variable the emulator does not know (a "
                    "__shared__ variable in a function with external linkage?)",
                    bytes, verb(kind), addr, who));
  }
  b.fault(
      fmt::format("out of bounds: {}-byte {} at {:#x}{} outside every device buffer and "
                  "shared variable{}",
                  bytes, verb(kind), addr, who, near));
}

void reset_static_shared(Region& r, const BlockRun& b) {
  if (r.kind != RegionKind::kStaticShared || r.block_stamp == b.first_epoch()) return;
  std::memset(reinterpret_cast<void*>(r.base), 0xff, r.size);  // undefined at block start
  r.block_stamp = b.first_epoch();
}

// The race and initialisation rules of access_check.h over the bytes of one access.
void track(Region& r, BlockRun& b, int t, uintptr_t addr, size_t bytes, Access kind) {
  const uint32_t e = b.epoch(), me = b.global_thread(t);
  const auto per_block = static_cast<uint32_t>(b.launch().threads);
  const uint32_t floor = r.is_shared() ? b.first_epoch() : b.launch().first_epoch;
  const auto conflicts = [&](uint32_t pe, uint32_t pid) {
    return pid != me && (pid / per_block != me / per_block || pe == e);
  };
  const char* space = r.is_shared() ? "shared memory race" : "device memory race";
  // Why the two accesses are unordered.
  const auto unordered = [&](uint32_t pid) {
    return pid / per_block == me / per_block ? "with no __syncthreads between"
                                             : "in another block of this launch (blocks are not "
                                               "ordered)";
  };
  for (size_t i = 0; i < bytes; ++i) {
    ShadowByte& s = *r.shadow_of(addr + i);
    const bool w_live = s.w_epoch != 0 && s.w_epoch >= floor;
    const uint32_t w_id = s.w_thread & ~kAtomicBit;
    const bool w_atomic = (s.w_thread & kAtomicBit) != 0;
    const bool r_live = s.r_epoch != 0 && s.r_epoch >= floor;
    const uint32_t r_id = s.r_thread & ~kManyBit;
    const bool r_many = r_live && (s.r_thread & kManyBit) != 0 && s.r_epoch == e;
    if (kind != Access::kWrite && r.is_shared() && !w_live) {
      b.fault(
          fmt::format("{} {} of {} bytes at {}: not written by any thread of the block since "
                      "it started",
                      thread_name(b, me), verb(kind), bytes, describe_offset(r, addr + i)));
    }
    if (w_live && conflicts(s.w_epoch, w_id) && !(kind == Access::kAtomic && w_atomic)) {
      b.fault(fmt::format("{}: {} {}s {} bytes at {}, which {} wrote{} {}", space,
                          thread_name(b, me), verb(kind), bytes, describe_offset(r, addr + i),
                          thread_name(b, w_id), w_atomic ? " (atomically)" : "", unordered(w_id)));
    }
    if (kind == Access::kRead) {
      const bool many = r_live && (r_many || conflicts(s.r_epoch, r_id));
      s.r_epoch = e;
      s.r_thread = me | (many ? kManyBit : 0u);
      continue;
    }
    if (r_live && (r_many || conflicts(s.r_epoch, r_id))) {
      const std::string readers = r_id == me
                                      ? std::string("other threads")
                                      : thread_name(b, r_id) + (r_many ? " (and others)" : "");
      b.fault(fmt::format("{}: {} {}s {} bytes at {}, which {} read {}", space, thread_name(b, me),
                          verb(kind), bytes, describe_offset(r, addr + i), readers,
                          r_many ? "with no __syncthreads between" : unordered(r_id)));
    }
    s.w_epoch = e;
    s.w_thread = me | (kind == Access::kAtomic ? kAtomicBit : 0u);
  }
}

}  // namespace

const Region* check_access(BlockRun& b, int t, uintptr_t addr, size_t bytes, Access kind) {
  const LaunchRun& l = b.launch();
  if (addr >= l.params_begin && addr + bytes <= l.params_end) {
    if (kind != Access::kRead) b.fault("writes the launch's argument values");
    return nullptr;
  }
  Device& d = Device::get();
  ++d.stats().accesses;
  Region* r = d.memory().find(addr);
  if (r == nullptr) {
    if (kind == Access::kRead && image_part(addr) == ImagePart::kReadOnly) return nullptr;
    stray(b, t, addr, bytes, kind);
  }
  if (addr + bytes > r->base + r->size) {
    b.fault(fmt::format("out of bounds: {} {} of {} bytes at {}",
                        thread_name(b, b.global_thread(t)), verb(kind), bytes,
                        describe_offset(*r, addr)));
  }
  if ((bytes == 2 || bytes == 4 || bytes == 8 || bytes == 16) && addr % bytes != 0) {
    b.fault(fmt::format("misaligned address: {} {} of {} bytes at {}",
                        thread_name(b, b.global_thread(t)), verb(kind), bytes,
                        describe_offset(*r, addr)));
  }
  reset_static_shared(*r, b);
  track(*r, b, t, addr, bytes, kind);
  return r;
}

}  // namespace kiln::emul
