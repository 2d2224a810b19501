#include "kiln/model/rope_table.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kiln {

RopeTables::RopeTables(const Qwen2Config& config, const Backend& be)
    : config_(config), be_(be), cos_(be, 0), sin_(be, 0) {}

void RopeTables::reserve(int n, int cap) {
  if (n <= positions_) return;
  const int P = cap > 0 ? std::min(cap, std::max(n, 2 * positions_)) : std::max(n, 2 * positions_);
  const int D = static_cast<int>(config_.head_dim()), half = D / 2;
  const size_t count = static_cast<size_t>(P) * half;
  std::vector<float> c(count), s(count);
  for (int p = 0; p < P; ++p) {
    for (int d = 0; d < half; ++d) {
      const double inv_freq = std::pow(config_.rope_theta, -2.0 * d / D);
      const double ang = p * inv_freq;
      c[static_cast<size_t>(p) * half + d] = static_cast<float>(std::cos(ang));
      s[static_cast<size_t>(p) * half + d] = static_cast<float>(std::sin(ang));
    }
  }
  cos_.resize(count);
  sin_.resize(count);
  be_.copy_to_device(cos_.data(), c.data(), count * sizeof(float));
  be_.copy_to_device(sin_.data(), s.data(), count * sizeof(float));
  be_.synchronize();  // the host tables go out of scope
  positions_ = P;
}

}  // namespace kiln
