// The synchronous CPU backend's memory and copies: device memory is host memory.
#include <cstdlib>
#include <cstring>
#include <new>

#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/host_event.h"
#include "kiln/kernels/device/host_cpu.h"

namespace kiln {

namespace {
class DoneEvent final : public Event {
 public:
  void synchronize() const override {}
};
}  // namespace

SyncStream::SyncStream() : done_(std::make_shared<DoneEvent>()) {}

std::shared_ptr<Event> SyncStream::record_timed() {
  auto e = std::make_shared<HostEvent>();
  e->set();
  return e;
}

void* CpuBackend::alloc(size_t bytes) const {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) throw std::bad_alloc();
  memory_.allocated(p, bytes);
  return p;
}

double CpuBackend::peak_flops() const {
  std::call_once(peak_once_, [this] {
    const bool bf16 = bf16_ && gemm_bf16_native();
    peak_flops_ = 1e9 * (bf16 ? measure_bf16_peak_gflops() : measure_fp32_peak_gflops());
  });
  return peak_flops_;
}

void CpuBackend::free(void* p) const {
  memory_.freed(p);
  std::free(p);
}

void CpuBackend::copy_to_device(void* dst, const void* host_src, size_t bytes) const {
  if (bytes) std::memcpy(dst, host_src, bytes);
}

void CpuBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) const {
  if (bytes) std::memcpy(host_dst, src, bytes);
}

void CpuBackend::copy_on_device(void* dst, const void* src, size_t bytes) const {
  if (bytes) std::memmove(dst, src, bytes);
}

void CpuBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                         size_t width, size_t rows) const {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  for (size_t r = 0; r < rows; ++r) std::memcpy(d + r * dst_pitch, s + r * src_pitch, width);
}

void CpuBackend::fill_zero(void* dst, size_t bytes) const {
  if (bytes) std::memset(dst, 0, bytes);
}

}  // namespace kiln
