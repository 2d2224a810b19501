#include "kernels/emul/memory_map.h"

#include <fmt/format.h>
#include <link.h>

#include <cstdlib>
#include <iterator>
#include <vector>

namespace kiln::emul {

void Region::FreeShadow::operator()(ShadowByte* p) const { std::free(p); }

ShadowByte* Region::shadow_of(uintptr_t addr) {
  if (shadow == nullptr) {
    shadow.reset(static_cast<ShadowByte*>(std::calloc(size, sizeof(ShadowByte))));
    if (shadow == nullptr) throw std::bad_alloc();
  }
  return shadow.get() + (addr - base);
}

Region& MemoryMap::add(RegionKind kind, const void* base, size_t size, size_t redzone,
                       std::string name) {
  const auto b = reinterpret_cast<uintptr_t>(base);
  last_ = nullptr;
  regions_.erase(b);
  Region& r = regions_[b];
  r.kind = kind;
  r.base = b;
  r.size = size;
  r.redzone = redzone;
  r.name = std::move(name);
  return r;
}

void MemoryMap::remove(const void* base) {
  last_ = nullptr;
  regions_.erase(reinterpret_cast<uintptr_t>(base));
}

Region* MemoryMap::find(uintptr_t addr) {
  if (last_ != nullptr && addr >= last_->base &&
      addr < last_->base + last_->size + last_->redzone) {
    return last_;
  }
  auto it = regions_.upper_bound(addr);
  if (it == regions_.begin()) return nullptr;
  Region& r = std::prev(it)->second;
  if (addr >= r.base + r.size + r.redzone) return nullptr;
  last_ = &r;
  return &r;
}

const Region* MemoryMap::below(uintptr_t addr) const {
  auto it = regions_.upper_bound(addr);
  return it == regions_.begin() ? nullptr : &std::prev(it)->second;
}

const Region* MemoryMap::above(uintptr_t addr) const {
  auto it = regions_.upper_bound(addr);
  return it == regions_.end() ? nullptr : &it->second;
}

namespace {

struct ImageRange {
  uintptr_t begin, end;
  bool writable;
};

int collect_ranges(dl_phdr_info* info, size_t, void* out) {
  auto* ranges = static_cast<std::vector<ImageRange>*>(out);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t b = info->dlpi_addr + ph.p_vaddr;
    ranges->push_back({b, b + ph.p_memsz, (ph.p_flags & PF_W) != 0});
  }
  return 0;
}

const std::vector<ImageRange>& image_ranges() {
  static const std::vector<ImageRange> ranges = [] {
    std::vector<ImageRange> r;
    dl_iterate_phdr(&collect_ranges, &r);
    return r;
  }();
  return ranges;
}

}  // namespace

ImagePart image_part(uintptr_t addr) {
  for (const ImageRange& r : image_ranges()) {
    if (addr >= r.begin && addr < r.end) {
      return r.writable ? ImagePart::kWritable : ImagePart::kReadOnly;
    }
  }
  return ImagePart::kNone;
}

std::string describe_offset(const Region& r, uintptr_t addr) {
  const char* kind = r.kind == RegionKind::kGlobal ? "device buffer" : "__shared__";
  const long long off = static_cast<long long>(addr) - static_cast<long long>(r.base);
  return fmt::format("{} {} ({} bytes) {} {}", kind, r.name, r.size, off < 0 ? "-" : "+",
                     off < 0 ? -off : off);
}

}  // namespace kiln::emul
