// Attention test cases shared by the CUDA kernels' tests on a GPU (cuda_attention_test) and
// under the CPU emulator (emul/emul_attention_test): a shape with optional document starts, the
// random inputs and the five outputs each compares with the CPU backend's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kiln/kernels/ops.h"

namespace kiln::testing {

struct AttnCase {
  AttnShape s;
  std::vector<int32_t> doc_start;  // (B, T), empty: null
};

// Row b of doc_start holds documents starting at `starts` (0 first) shifted by b (so rows differ).
inline AttnCase make_attn_case(AttnShape s, const std::vector<int>& starts = {}) {
  AttnCase c{s, {}};
  if (starts.empty()) return c;
  c.doc_start.resize(static_cast<size_t>(s.B) * s.T);
  for (int b = 0; b < s.B; ++b) {
    int cur = 0;
    for (int t = 0; t < s.T; ++t) {
      for (const int st : starts) {
        if (st > 0 && t == std::min(st + b, s.T - 1)) cur = t;
      }
      c.doc_start[static_cast<size_t>(b) * s.T + t] = cur;
    }
  }
  return c;
}

struct AttnOutputs {
  std::vector<float> y, lse, dq, dk, dv;
};

// q, k, v and dy of a shape, from `random(n, seed, scale, offset)` with seeds 11 to 14.
struct AttnInputs {
  using Random = std::vector<float> (*)(size_t, uint32_t, float, float);
  std::vector<float> q, k, v, dy;
  AttnInputs(const AttnShape& s, Random random) {
    const size_t nq = static_cast<size_t>(s.B) * s.T * s.H * s.D;
    const size_t nk = static_cast<size_t>(s.B) * s.T * s.KV * s.D;
    q = random(nq, 11, 1.0f, 0.0f);
    k = random(nk, 12, 1.0f, 0.0f);
    v = random(nk, 13, 1.0f, 0.0f);
    dy = random(nq, 14, 1.0f, 0.0f);
  }
};

inline const int32_t* doc_start_or_null(const AttnCase& c) {
  return c.doc_start.empty() ? nullptr : c.doc_start.data();
}

// The CPU backend's forward, then its backward from its own y and lse: what the kernels match.
inline AttnOutputs attention_on(const Backend& cpu, const AttnCase& c, const AttnInputs& in) {
  const AttnShape& s = c.s;
  AttnOutputs o{std::vector<float>(in.q.size()), std::vector<float>(size_t{1} * s.B * s.H * s.T),
                std::vector<float>(in.q.size()), std::vector<float>(in.k.size()),
                std::vector<float>(in.v.size())};
  cpu.attention_forward(o.y.data(), o.lse.data(), in.q.data(), in.k.data(), in.v.data(),
                        doc_start_or_null(c), s);
  cpu.attention_backward(o.dq.data(), o.dk.data(), o.dv.data(), in.dy.data(), in.q.data(),
                         in.k.data(), in.v.data(), o.y.data(), o.lse.data(), doc_start_or_null(c),
                         s);
  return o;
}

}  // namespace kiln::testing
