#include "kernels/emul/device_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace kiln::emul {

void Device::FreeAligned::operator()(unsigned char* p) const { std::free(p); }

Device::Device()
    : dynamic_shared_(
          static_cast<unsigned char*>(std::aligned_alloc(128, kMaxDynamicSharedBytes))) {}

Device& Device::get() {
  static Device d;
  return d;
}

void Device::fault(std::string what) {
  if (fault_.empty()) {
    fault_ = std::move(what);
  } else {
    ++more_faults_;
  }
}

std::string Device::take_fault() {
  std::string f = std::move(fault_);
  if (more_faults_ > 0) f += fmt::format(" (and {} more)", more_faults_);
  fault_.clear();
  more_faults_ = 0;
  api_error_ = cudaSuccess;
  return f;
}

void Device::api_error(cudaError_t e, std::string what) {
  api_error_ = e;
  fault(std::move(what));
}

cudaError_t Device::last_error(bool clear) {
  if (api_error_ != cudaSuccess) {
    const cudaError_t e = api_error_;
    if (clear) api_error_ = cudaSuccess;
    return e;
  }
  return faulted() ? cudaErrorLaunchFailure : cudaSuccess;
}

size_t Device::max_dynamic_shared(const void* kernel) const {
  auto it = max_dynamic_.find(kernel);
  return it == max_dynamic_.end() ? kDefaultDynamicSharedBytes : static_cast<size_t>(it->second);
}

Fiber& Device::fiber(int i) {
  while (static_cast<int>(fibers_.size()) <= i) {
    fibers_.push_back(std::make_unique<Fiber>(kFiberStackBytes));
  }
  return *fibers_[static_cast<size_t>(i)];
}

// Fake addresses lie in a range no mapping uses (the top of the lower half on x86-64 and arm64
// user space is unlikely to be mapped, and a fake address is never dereferenced).
constexpr uintptr_t kFakeBase = uintptr_t{0x6000} << 32;
constexpr uintptr_t kFakeEnd = uintptr_t{0x7000} << 32;

void Device::set_dry_run(bool on) {
  if (on && dry_run_) throw std::logic_error("emulator: a DryRun is already active");
  dry_run_ = on;
  next_fake_ = kFakeBase;
  launches_.clear();
  allocations_.clear();
}

void* Device::fake_alloc(size_t bytes, bool record) {
  if (record) allocations_.push_back(bytes);
  const uintptr_t p = next_fake_;
  next_fake_ += (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  if (next_fake_ > kFakeEnd) throw std::length_error("emulator: dry run address space exhausted");
  return reinterpret_cast<void*>(p);
}

bool Device::is_fake(const void* p) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a >= kFakeBase && a < kFakeEnd;
}

DryRun::DryRun() { Device::get().set_dry_run(true); }
DryRun::~DryRun() { Device::get().set_dry_run(false); }
const std::vector<LaunchRecord>& DryRun::launches() const { return Device::get().launch_records(); }
const std::vector<size_t>& DryRun::allocations() const {
  return Device::get().allocation_records();
}

Stats stats() { return Device::get().stats(); }

std::string take_fault() { return Device::get().take_fault(); }

}  // namespace kiln::emul
