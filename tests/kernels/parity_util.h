// Helpers of backend_parity_test: device memory of the backend under test filled from host
// vectors and read back, bf16 rounding on the host, and the comparison against the CPU reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kernels/ops.h"
#include "kiln/tensor/dtype.h"

namespace kiln::testing {

// Device allocations of `be`, freed with the object; uploads wait for the copy to finish.
class DeviceMem {
 public:
  explicit DeviceMem(const Backend& be) : be_(be) {}
  ~DeviceMem() {
    be_.synchronize();
    for (void* p : owned_) be_.free(p);
  }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;

  template <typename T>
  T* up(const std::vector<T>& h) {
    T* d = zeros<T>(h.size());
    be_.copy_to_device(d, h.data(), h.size() * sizeof(T));
    be_.synchronize();
    return d;
  }
  template <typename T>
  T* zeros(size_t n) {
    auto* d = static_cast<T*>(be_.alloc(std::max<size_t>(n, 1) * sizeof(T)));
    owned_.push_back(d);
    be_.fill_zero(d, std::max<size_t>(n, 1) * sizeof(T));
    return d;
  }
  template <typename T>
  std::vector<T> down(const T* d, size_t n) {
    std::vector<T> h(n);
    be_.copy_to_host(h.data(), d, n * sizeof(T));
    be_.synchronize();
    return h;
  }

 private:
  const Backend& be_;
  std::vector<void*> owned_;
};

// x rounded to the nearest bf16 (as float), and as bit patterns.
inline std::vector<float> bf16_rounded(std::vector<float> x) {
  for (float& v : x) v = bf16_to_f32(f32_to_bf16(v));
  return x;
}
inline std::vector<uint16_t> bf16_bits(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_bf16(x[i]);
  return h;
}
inline std::vector<float> widen(const std::vector<uint16_t>& h) {
  std::vector<float> x(h.size());
  for (size_t i = 0; i < h.size(); ++i) x[i] = bf16_to_f32(h[i]);
  return x;
}

// max |got - want| <= rtol * max |want| (and no NaN in got unless want has one there).
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double ref = 0, worst = 0;
  size_t at = 0, nans = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ref = std::max(ref, static_cast<double>(std::fabs(want[i])));
    if (std::isnan(got[i]) != std::isnan(want[i])) ++nans;
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (err > worst) {
      worst = err;
      at = i;
    }
  }
  EXPECT_EQ(nans, 0u) << what << ": NaN where the reference has none";
  EXPECT_LE(worst, rtol * std::max(ref, 1e-30))
      << what << ": worst at " << at << " got " << got[at] << " want " << want[at]
      << " (max |want| " << ref << ")";
}

}  // namespace kiln::testing
