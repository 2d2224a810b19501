// A small random model (any family) for model-level tests: every path matters (HF-style init would
// be too small), and every test that needs one builds the same kind.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "common/grad_check.h"
#include "kiln/base/ignore_index.h"
#include "kiln/data/batch.h"
#include "kiln/model/config.h"
#include "kiln/model/unit_access.h"

namespace kiln::testing {

inline ModelConfig small_config(bool tied = true, int heads = 4, int kv = 2) {
  ModelConfig c;
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

// `family` (a family's defaults) with the sizes of `shape`: hidden, intermediate, layers, heads,
// kv heads, vocabulary, rope_theta and tie_word_embeddings; the rest stays the family's.
inline ModelConfig with_sizes_of(ModelConfig family, const ModelConfig& shape) {
  family.hidden_size = shape.hidden_size;
  family.intermediate_size = shape.intermediate_size;
  family.num_hidden_layers = shape.num_hidden_layers;
  family.num_attention_heads = shape.num_attention_heads;
  family.num_key_value_heads = shape.num_key_value_heads;
  family.vocab_size = shape.vocab_size;
  family.rope_theta = shape.rope_theta;
  family.tie_word_embeddings = shape.tie_word_embeddings;
  return family;
}

// small_config as `family` has it (family_defaults: Qwen2's biases, Qwen3's q/k norms): Qwen3
// with head_dim 8, so q_proj is (heads * 8, 16), not hidden / heads; Llama with llama3 RoPE
// scaling over an original context of 16 (with head_dim 4 and theta 10000, its frequencies fall
// below, between and above the bands).
inline ModelConfig small_family_config(ModelFamily family, bool tied = true, int heads = 4,
                                       int kv = 2) {
  const ModelConfig s = small_config(tied, heads, kv);
  ModelConfig c = with_sizes_of(family_defaults(family), s);
  c.rms_norm_eps = s.rms_norm_eps;
  if (family == ModelFamily::kQwen3) c.head_dim_field = 8;
  if (family == ModelFamily::kLlama)
    c.rope_scaling = {RopeScaling::Type::kLlama3, 4.0, 1.0, 4.0, 16};
  return c;
}

// Matrices and biases N(0, scale^2), norm weights 1 + N(0, 0.1^2); one seed per tensor. Through
// load_unit, so a unit stored in bf16 (a frozen one under a bf16 backend) gets them rounded.
inline void randomize(ParamStore& store, const ParamLayout& layout, uint32_t seed,
                      float scale = 0.3f) {
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<float> unit(layout.units()[u].numel);
    for (const auto& e : layout.units()[u].entries) {
      const bool norm = e.name.find("norm") != std::string::npos;
      auto v = random_vec(e.numel, seed++, norm ? 0.1f : scale, norm ? 1.0f : 0.0f);
      std::copy(v.begin(), v.end(), unit.begin() + static_cast<long>(e.offset));
    }
    store.load_unit(u, unit.data());
  }
}

// A (B, T) batch of ids below V for gradient checks, each token targeting the next, one label
// masked; `packed`: row 0 holds two documents, [0, 4) and [4, T), with another label masked.
inline Batch grad_batch(int B, int T, int V, bool packed) {
  Batch b;
  b.resize(B, T);
  for (int i = 0; i < B * T; ++i) {
    b.input_ids[i] = (i * 7 + 3) % V;
    b.positions[i] = i % T;
  }
  for (int r = 0; r < B; ++r) {
    for (int t = 0; t + 1 < T; ++t) b.targets[r * T + t] = b.input_ids[r * T + t + 1];
  }
  b.targets[1] = kIgnoreIndex;  // a masked label
  if (packed) {                 // row 0 holds two documents: [0, 4) and [4, T)
    for (int t = 4; t < T; ++t) {
      b.doc_start[t] = 4;
      b.positions[t] = t - 4;
    }
    b.targets[3] = kIgnoreIndex;
  }
  return b;
}

}  // namespace kiln::testing
