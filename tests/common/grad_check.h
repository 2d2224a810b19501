// Finite-difference gradient checks for float32 ops: central differences of a double-valued
// loss, compared to the analytic gradient by relative L2 error over sampled coordinates.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace kiln::testing {

inline std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f,
                                     float offset = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = offset + scale * d(rng);
  return v;
}

// Relative L2 error of a against b (n elements).
inline double rel_err(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  return rel_err(a.data(), b.data(), b.size());
}

inline double dot(const float* a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < b.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Relative L2 error between analytic and numeric gradients of `loss` w.r.t. x[0..n), sampling at
// most `max_coords` coordinates. `loss` must recompute everything from x.
inline double fd_rel_error(const std::function<double()>& loss, float* x, const float* analytic,
                           size_t n, size_t max_coords = 64, float h = 1e-2f) {
  std::vector<size_t> idx(n);
  for (size_t i = 0; i < n; ++i) idx[i] = i;
  if (n > max_coords) {
    std::mt19937 rng(7);
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(max_coords);
  }
  double num2 = 0, diff2 = 0;
  for (size_t i : idx) {
    const float orig = x[i];
    const float step = h * std::max(1.0f, std::fabs(orig));
    // Five-point stencil: truncation error O(h^4), so a float32 loss still gives ~1e-4 accuracy.
    auto at = [&](float d) {
      x[i] = orig + d;
      return loss();
    };
    const double num =
        (-at(2 * step) + 8 * at(step) - 8 * at(-step) + at(-2 * step)) / (12.0 * step);
    x[i] = orig;
    num2 += num * num;
    diff2 += (num - analytic[i]) * (num - analytic[i]);
  }
  return std::sqrt(diff2) / std::max(std::sqrt(num2), 1e-12);
}

}  // namespace kiln::testing
