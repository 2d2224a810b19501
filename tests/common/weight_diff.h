// Squared differences between the tensors of two Hugging Face model directories (or
// .safetensors files), per tensor: sum (a - b)^2 and sum a^2, for relative-L2 checks.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/io/checkpoint_reader.h"

namespace kiln::testing {

struct SquaredDiff {
  double d2 = 0, x2 = 0;  // sum (a - b)^2, sum a^2
};

// Every tensor of `a`, read from both as f32 (b must have each with the same shape).
inline std::map<std::string, SquaredDiff> squared_diffs(const fs::path& a, const fs::path& b) {
  CheckpointReader ra(a), rb(b);
  std::map<std::string, SquaredDiff> out;
  for (const auto& name : ra.names()) {
    std::vector<float> x(ra.info(name).numel()), y(x.size());
    ra.read_f32(name, ra.info(name).shape, x.data());
    rb.read_f32(name, ra.info(name).shape, y.data());
    SquaredDiff& s = out[name];
    for (size_t i = 0; i < x.size(); ++i) {
      const double d = x[i] - static_cast<double>(y[i]);
      s.d2 += d * d;
      s.x2 += static_cast<double>(x[i]) * x[i];
    }
  }
  return out;
}

}  // namespace kiln::testing
