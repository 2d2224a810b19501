#include "kiln/model/rope_table.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kiln {

namespace {
// transformers' _compute_llama3_parameters for one frequency.
double llama3_scaled(double inv_freq, const RopeScaling& r) {
  const double old_ctx = static_cast<double>(r.original_max_position_embeddings);
  const double low_freq_wavelen = old_ctx / r.low_freq_factor;
  const double high_freq_wavelen = old_ctx / r.high_freq_factor;
  const double wavelen = 2 * std::numbers::pi / inv_freq;
  if (wavelen < high_freq_wavelen) return inv_freq;
  if (wavelen > low_freq_wavelen) return inv_freq / r.factor;
  const double smooth =
      (old_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  return (1 - smooth) * inv_freq / r.factor + smooth * inv_freq;
}
}  // namespace

std::vector<double> rope_inv_freq(const ModelConfig& config) {
  const int D = static_cast<int>(config.head_dim()), half = D / 2;
  const RopeScaling& r = config.rope_scaling;
  std::vector<double> out(half);
  for (int d = 0; d < half; ++d) {
    const double inv_freq = std::pow(config.rope_theta, -2.0 * d / D);
    switch (r.type) {
      case RopeScaling::Type::kNone:
        out[d] = inv_freq;
        break;
      case RopeScaling::Type::kLinear:
        out[d] = inv_freq / r.factor;
        break;
      case RopeScaling::Type::kLlama3:
        out[d] = llama3_scaled(inv_freq, r);
        break;
    }
  }
  return out;
}

RopeTables::RopeTables(const ModelConfig& config, const Backend& be)
    : be_(be), inv_freq_(rope_inv_freq(config)), cos_(be, 0), sin_(be, 0) {}

void RopeTables::reserve(int n, int cap) {
  if (n <= positions_) return;
  const int P = cap > 0 ? std::min(cap, std::max(n, 2 * positions_)) : std::max(n, 2 * positions_);
  const int half = static_cast<int>(inv_freq_.size());
  const size_t count = static_cast<size_t>(P) * half;
  std::vector<float> c(count), s(count);
  for (int p = 0; p < P; ++p) {
    for (int d = 0; d < half; ++d) {
      const double ang = p * inv_freq_[d];
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
