#include "kernels/emul/device_state.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

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

Stats stats() { return Device::get().stats(); }

std::string take_fault() { return Device::get().take_fault(); }

}  // namespace kiln::emul
