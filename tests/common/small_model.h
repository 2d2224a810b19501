// A small random Qwen2 for model-level tests: every path matters (HF-style init would be too
// small), and every test that needs one builds the same kind.
#pragma once

#include <algorithm>
#include <string>

#include "common/grad_check.h"
#include "kiln/model/config.h"
#include "kiln/model/unit_access.h"

namespace kiln::testing {

inline Qwen2Config small_config(bool tied = true, int heads = 4, int kv = 2) {
  Qwen2Config c;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv;
  c.vocab_size = 23;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = tied;
  return c;
}

// Matrices and biases N(0, 0.3^2), norm weights 1 + N(0, 0.1^2); one seed per tensor.
inline void randomize(ParamStore& store, const ParamLayout& layout, uint32_t seed) {
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const auto& e : layout.units()[u].entries) {
      const bool norm = e.name.find("norm") != std::string::npos;
      auto v = random_vec(e.numel, seed++, norm ? 0.1f : 0.3f, norm ? 1.0f : 0.0f);
      std::copy(v.begin(), v.end(), store.params(u).data() + e.offset);
    }
  }
}

}  // namespace kiln::testing
