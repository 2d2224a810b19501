// What the emulated kernel tests share: device arrays of the emulated device, the check that a
// case left no fault, and the comparison against the CPU backend at the parity suite's
// tolerances (tests/kernels/backend_parity.h), printing each output's worst error.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/backend_parity.h"
#include "kernels/emul/dry_run_backend.h"
#include "kernels/emul/emulator.h"
#include "kiln/kernels/cuda/stream_scratch.h"
#include "kiln/tensor/dtype.h"

namespace kiln::emul {

// n elements of T in emulated device memory (bounds checked, named in fault messages); filled
// from host values or left undefined (0xff bytes).
template <typename T>
class DeviceArray {
 public:
  DeviceArray(size_t n, const std::string& name)
      : n_(n), p_(static_cast<T*>(device_alloc(std::max<size_t>(n, 1) * sizeof(T), name))) {}
  DeviceArray(const std::vector<T>& host, const std::string& name)
      : DeviceArray(host.size(), name) {
    if (!host.empty()) std::memcpy(p_, host.data(), host.size() * sizeof(T));
  }
  ~DeviceArray() { device_free(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }
  std::vector<T> host() const { return std::vector<T>(p_, p_ + n_); }

 private:
  size_t n_;
  T* p_;
};

// The reductions' scratch (rmsnorm_backward's dw, sum_squares's partial sums): from the
// stream-ordered pool, or, as on a device without one, one persistent buffer of the backend's
// memory (here emulated device memory).
struct ScratchPools {
  DryRunCudaBackend owner{ComputeDType::kFp32};  // outside a DryRun: emulated device memory
  MemoryCounter counter;
  emul_cuda::StreamScratchPool pooled{owner, counter, true};
  emul_cuda::StreamScratchPool persistent{owner, counter, false};
};

// The fault of the case's launches: none.
inline void expect_no_fault() {
  const std::string f = take_fault();
  EXPECT_TRUE(f.empty()) << f;
}

inline std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }
inline std::vector<double> widen_bf16(const std::vector<uint16_t>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(v[i]);
  return out;
}

// parity::expect_close (max |got - want| / max |want| within tol, every value finite), printing
// the figure.
inline void expect_close(const std::string& what, const std::vector<double>& got,
                         const std::vector<double>& want, double tol) {
  parity::expect_close(what, got, want, tol);
  if (got.size() != want.size()) return;
  std::printf("[ emul     ] %-48s worst %.2e (tol %.0e, %zu values)\n", what.c_str(),
              parity::rel_error(got, want).rel, tol, want.size());
}
inline void expect_close(const std::string& what, const std::vector<float>& got,
                         const std::vector<float>& want, double tol) {
  expect_close(what, widen(got), widen(want), tol);
}

// The parity suite's tolerances (backend_parity.h): elementwise fp32, a bf16-stored output, and
// matrix products with bf16 inputs.
inline constexpr double kElementwise = parity::kExact.fp32;
inline constexpr double kBf16Stored = parity::kBf16Stored.bf16;
inline constexpr double kProductBf16 = parity::kProduct.bf16;
inline constexpr double kProductFp32 = parity::kProduct.fp32;

// At the end of each test binary: what the emulator ran and checked.
class StatsPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    const Stats s = stats();
    std::printf(
        "[ emul     ] %llu launches, %llu blocks, %llu threads, %llu barriers, %llu warp "
        "operations, %llu device and shared memory accesses checked\n",
        static_cast<unsigned long long>(s.launches), static_cast<unsigned long long>(s.blocks),
        static_cast<unsigned long long>(s.threads), static_cast<unsigned long long>(s.barriers),
        static_cast<unsigned long long>(s.warp_ops), static_cast<unsigned long long>(s.accesses));
  }
};
inline const bool kStatsPrinterAdded =
    (::testing::AddGlobalTestEnvironment(new StatsPrinter), true);  // gtest owns it

inline std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f,
                                        float offset = 0.0f) {
  return parity::random_values(n, seed, scale, offset);
}

}  // namespace kiln::emul
