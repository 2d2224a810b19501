// The pieces of a test that calls a split table's use (model/sharded_table.h) on ranks as threads:
// deterministic values, rank r's part of a (V, C) table split over S ranks, as FSDP lends it,
// and the ranks themselves (on_split_table).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/fresh_scratch.h"
#include "common/rank_threads.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/store.h"
#include "kiln/model/sharded_table.h"

namespace kiln::testing {

// Deterministic values in [-scale, scale).
inline std::vector<float> lcg_values(size_t n, uint32_t seed, float scale) {
  std::vector<float> v(n);
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& x : v) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    x = scale * (static_cast<float>(z >> 40) * 0x1p-23f - 1.0f);
  }
  return v;
}

// Rank r's whole rows of the table w (V, C) split over S ranks, with `grad` (resized and zeroed
// here) as its gradient rows, the group and the buffers' lender.
inline ShardedTable rank_rows(const std::vector<float>& w, int V, int C, int S, int r,
                              std::vector<float>& grad, Communicator* group,
                              ScratchLender* scratch) {
  const int span = (V + S - 1) / S;
  ShardedTable t;
  t.a = std::min(V, r * span);
  t.b = std::min(V, (r + 1) * span);
  t.span = span;
  t.rows = w.data() + static_cast<size_t>(t.a) * C;
  grad.assign(static_cast<size_t>(t.b - t.a) * C, 0.0f);
  t.grad = grad.data();
  t.group = group;
  t.scratch = scratch;
  return t;
}

// body(r, t) on S ranks as threads, each with its Gloo communicator, fresh buffers and its rows
// t of w (V, C), their gradient rows zeroed (t.grad: t.b - t.a rows).
template <class Body>
void on_split_table(const Backend& be, const std::vector<float>& w, int V, int C, int S,
                    Body&& body) {
  auto store = std::make_shared<MemoryStore>();
  run_rank_threads(S, [&](int r) {
    auto comm = make_gloo_communicator(store, r, S, GlooOptions{});
    FreshScratch scratch(be);
    std::vector<float> grad;
    body(r, rank_rows(w, V, C, S, r, grad, comm.get(), &scratch));
  });
}

}  // namespace kiln::testing
