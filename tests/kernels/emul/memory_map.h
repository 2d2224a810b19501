// What the emulator knows about memory an emulated kernel may touch: device buffers (cudaMalloc
// and friends: exact size, a redzone after), static __shared__ variables (registered at start-up
// by the instrumentation of the kernel sources: exact size and redzone, per variable), and one
// launch's dynamic shared memory. Each region keeps a shadow of its bytes for race tracking
// (access_check.h), made on first use (calloc: pages cost memory only once touched).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace kiln::emul {

// The race-tracking record of one byte: the last write and the last read (epochs: access_check.h).
struct ShadowByte {
  uint32_t w_epoch, w_thread;  // w_thread: launch-wide thread id, kAtomicBit when atomic
  uint32_t r_epoch, r_thread;  // r_thread: launch-wide thread id, kManyBit when several read
};
inline constexpr uint32_t kAtomicBit = 0x80000000u;
inline constexpr uint32_t kManyBit = 0x80000000u;

enum class RegionKind { kGlobal, kStaticShared, kDynamicShared };

struct Region {
  RegionKind kind;
  uintptr_t base;
  size_t size;     // usable bytes
  size_t redzone;  // bytes after the end that belong to no one (an access there is out of bounds)
  std::string name;
  // Static shared memory: the block (its first epoch) its contents were last reset for.
  uint32_t block_stamp = 0;
  struct FreeShadow {
    void operator()(ShadowByte* p) const;
  };
  std::unique_ptr<ShadowByte[], FreeShadow> shadow;
  ShadowByte* shadow_of(uintptr_t addr);
  bool is_shared() const { return kind != RegionKind::kGlobal; }
};

class MemoryMap {
 public:
  Region& add(RegionKind kind, const void* base, size_t size, size_t redzone, std::string name);
  void remove(const void* base);
  // The region whose bytes or redzone hold addr, or null.
  Region* find(uintptr_t addr);
  // The nearest region below addr and the nearest above (for messages about stray addresses).
  const Region* below(uintptr_t addr) const;
  const Region* above(uintptr_t addr) const;

 private:
  std::map<uintptr_t, Region> regions_;  // by base
  Region* last_ = nullptr;               // the last region found: most accesses repeat it
};

// Where addr lies in the executable's or a library's mapped image, for telling constant tables
// (read-only: reads allowed) from unregistered writable statics (a fault).
enum class ImagePart { kNone, kReadOnly, kWritable };
ImagePart image_part(uintptr_t addr);

// "buffer #3 (1024 bytes) + 16" for messages.
std::string describe_offset(const Region& r, uintptr_t addr);

}  // namespace kiln::emul
