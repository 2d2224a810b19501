// RoPE's cos/sin tables (positions, head_dim/2) of pos * inv_freq[d], computed in double as a
// reference would, uploaded to the device once and grown by doubling: one builder for training
// (Decoder) and decoding (Generator), so their rotations are bit-identical.
#pragma once

#include <vector>

#include "kiln/kernels/device/device_buffer.h"
#include "kiln/model/config.h"

namespace kiln {

// The rotation frequencies (D/2): inv_freq[d] = theta^(-2d/D), then config.rope_scaling's rule
// (transformers' modeling_rope_utils): linear divides each by factor; llama3 keeps those whose
// wavelength 2 pi / inv_freq is below original_max_position_embeddings / high_freq_factor,
// divides by factor those above original / low_freq_factor, and between them interpolates,
// smooth = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor),
// inv_freq = (1 - smooth) * inv_freq / factor + smooth * inv_freq.
std::vector<double> rope_inv_freq(const ModelConfig& config);

class RopeTables {
 public:
  RopeTables(const ModelConfig& config, const Backend& be);
  // Makes positions [0, n) available (at least; grows to max(n, 2 * current)), or to exactly
  // min(n, cap) when `cap` > 0. Returns once the host staging may be reused.
  void reserve(int n, int cap = 0);
  int positions() const { return positions_; }
  const float* cos() const { return cos_.data(); }  // device, (positions, D/2)
  const float* sin() const { return sin_.data(); }

 private:
  const Backend& be_;
  std::vector<double> inv_freq_;  // (D/2), computed once
  int positions_ = 0;
  DeviceBuffer<float> cos_, sin_;
};

}  // namespace kiln
