// The shapes and the fixture of the backend parity suite: Qwen2.5-0.5B and 1.5B per-layer shapes
// (few tokens, so the CPU reference runs in seconds) and a tiny one; at tiny sizes, the tiny one
// and two small ones with the flash kernels' head dims. The fixture gives each test its backend
// under test, or skips with the reason there is none.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "backend_parity.h"

namespace kiln::parity {

struct LayerShape {
  std::string name;
  int hidden, heads, kv_heads, head_dim, intermediate;
};
inline std::vector<LayerShape> layer_shapes(Sizes sizes) {
  if (sizes == Sizes::kTiny) {
    return {{"tiny", 8, 2, 1, 4, 12},
            {"small-hd64", 128, 2, 1, 64, 352},
            {"small-hd128", 256, 2, 1, 128, 704}};
  }
  return {{"tiny", 8, 2, 1, 4, 12},
          {"qwen2.5-0.5b", 896, 14, 2, 64, 4864},
          {"qwen2.5-1.5b", 1536, 12, 2, 128, 8960}};
}
// Tokens per op case.
inline constexpr int kTokens = 6;

// RoPE tables (max_pos, D/2) for theta 1e6 (Qwen2's), computed in double.
struct RopeTables {
  int max_pos;
  std::vector<float> cos, sin;
};
inline RopeTables rope_tables(int D, int max_pos = 64) {
  RopeTables t{max_pos, {}, {}};
  const int half = D / 2;
  for (int p = 0; p < max_pos; ++p) {
    for (int d = 0; d < half; ++d) {
      const double angle = p * std::pow(1e6, -2.0 * d / D);
      t.cos.push_back(static_cast<float>(std::cos(angle)));
      t.sin.push_back(static_cast<float>(std::sin(angle)));
    }
  }
  return t;
}

class BackendParity : public ::testing::TestWithParam<ParityParam> {
 protected:
  void SetUp() override {
    const TargetBackend& t = target_backend(GetParam().target);
    if (!t.backend) GTEST_SKIP() << t.missing;
    be_ = t.backend.get();
  }
  const Backend& be() const { return *be_; }
  Sizes sizes() const { return GetParam().sizes; }
  bool tiny() const { return sizes() == Sizes::kTiny; }
  std::vector<LayerShape> layer_shapes() const { return parity::layer_shapes(sizes()); }

 private:
  const Backend* be_ = nullptr;
};

}  // namespace kiln::parity
