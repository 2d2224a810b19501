// RoPE's cos/sin tables (positions, head_dim/2) of pos * theta^(-2d/D), computed in double as a
// reference would, uploaded to the device once and grown by doubling: one builder for training
// (Qwen2Model) and decoding (Generator), so their rotations are bit-identical.
#pragma once

#include "kiln/kernels/device/device_buffer.h"
#include "kiln/model/config.h"

namespace kiln {

class RopeTables {
 public:
  RopeTables(const Qwen2Config& config, const Backend& be);
  // Makes positions [0, n) available (at least; grows to max(n, 2 * current)), or to exactly
  // min(n, cap) when `cap` > 0. Returns once the host staging may be reused.
  void reserve(int n, int cap = 0);
  int positions() const { return positions_; }
  const float* cos() const { return cos_.data(); }  // device, (positions, D/2)
  const float* sin() const { return sin_.data(); }

 private:
  const Qwen2Config& config_;
  const Backend& be_;
  int positions_ = 0;
  DeviceBuffer<float> cos_, sin_;
};

}  // namespace kiln
