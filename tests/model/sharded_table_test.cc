// The lookup over a table split along its rows (model/sharded_table.h), directly: ranks as
// threads, each holding its whole rows [r * ceil(V / S), (r + 1) * ceil(V / S)) ∩ [0, V) of a
// (V, C) table (fsdp/shard_geometry.h's cut), against the unsplit table read on the host.
//   - forward: each rank's (N, C) rows are the whole table's rows at its ids (bf16-rounded under
//     a bf16 activation dtype), exactly;
//   - backward: each rank's gradient rows gain every rank's dout rows at the ids in its rows
//     (added to what they held), and nothing outside them is written.
// The ids include the rows on either side of each rank's boundary and repeat rows across ranks;
// a vocabulary of 9 over 4 ranks leaves the last rank no rows. And the one lending with a group
// that is not split (no_shard's whole table after its all-reduce): every rank adds every rank's
// rows.
#include "kiln/model/sharded_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/fresh_scratch.h"
#include "common/rank_threads.h"
#include "common/test_backend.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/store.h"

namespace kiln {
namespace {

constexpr int kC = 5;
constexpr float kGuard = 12345.0f;  // a row past the rank's rows, which no use may write

// Deterministic values in [-1, 1), with full fp32 mantissas (so bf16 rounding shows).
std::vector<float> values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + 7;
  for (float& x : v) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(z >> 40) * 0x1p-23f - 1.0f;
  }
  return v;
}

// Rank r's N ids: the first and last row of every rank's part, then rows spread over the table
// (shared with other ranks).
std::vector<int32_t> rank_ids(int r, int S, int V, int N) {
  const int span = (V + S - 1) / S;
  std::vector<int32_t> ids;
  for (int k = 0; k < S; ++k) {
    for (int row : {k * span, (k + 1) * span - 1}) {
      if (row < V) ids.push_back(row);
    }
  }
  std::rotate(ids.begin(), ids.begin() + (r % static_cast<int>(ids.size())), ids.end());
  for (int n = 0; ids.size() < static_cast<size_t>(N); ++n) ids.push_back((n * 7 + r * 5) % V);
  ids.resize(N);
  return ids;
}

struct Split {
  int S, V, N;
};

std::string name(const Split& s, const Backend& be) {
  return "S=" + std::to_string(s.S) + " V=" + std::to_string(s.V) + " N=" + std::to_string(s.N) +
         (be.activation_dtype() == DType::BF16 ? " bf16" : " fp32");
}

// Rank r's part of the table: rows [a, b) with its group and scratch (the rows and gradient are
// set by the caller).
ShardedTable part(int r, const Split& s, Communicator& group, ScratchLender& scratch) {
  const int span = (s.V + s.S - 1) / s.S;
  ShardedTable t;
  t.a = std::min(s.V, r * span);
  t.b = std::min(s.V, (r + 1) * span);
  t.span = span;
  t.group = &group;
  t.scratch = &scratch;
  return t;
}

void check_lookup(const Split& s, const Backend& be) {
  const auto w = values(static_cast<size_t>(s.V) * kC, 3);
  const bool bf16 = be.activation_dtype() == DType::BF16;
  auto store = std::make_shared<MemoryStore>();
  testing::run_rank_threads(s.S, [&](int r) {
    auto comm = make_gloo_communicator(store, r, s.S, GlooOptions{});
    testing::FreshScratch scratch(be);
    ShardedTable t = part(r, s, *comm, scratch);
    t.rows = w.data() + static_cast<size_t>(t.a) * kC;
    const auto ids = rank_ids(r, s.S, s.V, s.N);
    std::vector<float> out(static_cast<size_t>(s.N) * kC, -7.0f);
    table_lookup(be, t, ids.data(), s.N, kC, out.data());
    be.synchronize();
    for (int n = 0; n < s.N; ++n) {
      for (int c = 0; c < kC; ++c) {
        const float v = w[static_cast<size_t>(ids[n]) * kC + c];
        const float want = bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
        ASSERT_EQ(out[static_cast<size_t>(n) * kC + c], want)
            << name(s, be) << " rank " << r << " token " << n << " (row " << ids[n] << ") col "
            << c;
      }
    }
  });
}

// Every rank's dout rows at its ids summed into the whole table's gradient, starting from
// `start`, in rank order (the order the split backward adds them).
std::vector<double> whole_gradient(const Split& s, const std::vector<float>& start) {
  std::vector<double> g(start.begin(), start.end());
  for (int r = 0; r < s.S; ++r) {
    const auto ids = rank_ids(r, s.S, s.V, s.N);
    const auto dout = values(static_cast<size_t>(s.N) * kC, 100 + r);
    for (int n = 0; n < s.N; ++n) {
      for (int c = 0; c < kC; ++c) {
        g[static_cast<size_t>(ids[n]) * kC + c] += dout[static_cast<size_t>(n) * kC + c];
      }
    }
  }
  return g;
}

// whole: every rank lends the whole table with the group (rows [0, V)).
void check_backward(const Split& s, const Backend& be, bool whole) {
  const auto start = values(static_cast<size_t>(s.V) * kC, 4);
  const std::vector<double> want = whole_gradient(s, start);
  auto store = std::make_shared<MemoryStore>();
  testing::run_rank_threads(s.S, [&](int r) {
    auto comm = make_gloo_communicator(store, r, s.S, GlooOptions{});
    testing::FreshScratch scratch(be);
    ShardedTable t = part(r, s, *comm, scratch);
    if (whole) {
      t.a = 0;
      t.b = t.span = s.V;
    }
    const size_t held = static_cast<size_t>(t.b - t.a) * kC;
    std::vector<float> grad(start.begin() + static_cast<long>(t.a) * kC,
                            start.begin() + static_cast<long>(t.a) * kC + static_cast<long>(held));
    grad.resize(held + kC, kGuard);
    t.grad = grad.data();
    const auto ids = rank_ids(r, s.S, s.V, s.N);
    const auto dout = values(static_cast<size_t>(s.N) * kC, 100 + r);
    table_lookup_backward(be, t, ids.data(), dout.data(), s.N, kC);
    be.synchronize();
    const std::string what = name(s, be) + " rank " + std::to_string(r);
    for (size_t e = 0; e < held; ++e) {
      const double w = want[static_cast<size_t>(t.a) * kC + e];
      ASSERT_NEAR(grad[e], w, 1e-6 * std::max(1.0, std::fabs(w)))
          << what << " row " << t.a + static_cast<int>(e / kC) << " col " << e % kC;
    }
    for (size_t e = held; e < grad.size(); ++e) ASSERT_EQ(grad[e], kGuard) << what;
  });
}

const Split kSplits[] = {{2, 23, 8}, {3, 23, 7}, {4, 9, 6}};

TEST(ShardedTable, SplitLookupIsTheWholeTablesRows) {
  for (const Backend* be : {&testing::cpu_fp32(), &testing::cpu_bf16()}) {
    for (const Split& s : kSplits) check_lookup(s, *be);
  }
}

TEST(ShardedTable, SplitLookupBackwardAddsEveryRanksRowsIntoTheRanksRows) {
  for (const Split& s : kSplits) check_backward(s, testing::cpu_fp32(), false);
}

TEST(ShardedTable, WholeTableWithAGroupAddsEveryRanksRows) {
  for (const Split& s : kSplits) check_backward(s, testing::cpu_fp32(), true);
}

// With no group, the whole table: rows in the activation dtype are read as they are, fp32 rows
// under bf16 are rounded as acquire() would round them.
TEST(ShardedTable, WholeTableLookupReadsTheRowsAsAcquired) {
  const int V = 11, N = 9;
  const auto w = values(static_cast<size_t>(V) * kC, 5);
  std::vector<int32_t> ids(N);
  for (int n = 0; n < N; ++n) ids[n] = (n * 4 + 3) % V;
  for (const Backend* be : {&testing::cpu_fp32(), &testing::cpu_bf16()}) {
    const bool bf16 = be->activation_dtype() == DType::BF16;
    std::vector<float> out(static_cast<size_t>(N) * kC);
    table_lookup(*be, whole_table(w.data(), nullptr, V), ids.data(), N, kC, out.data());
    be->synchronize();
    for (int n = 0; n < N; ++n) {
      for (int c = 0; c < kC; ++c) {
        const float v = w[static_cast<size_t>(ids[n]) * kC + c];
        ASSERT_EQ(out[static_cast<size_t>(n) * kC + c], bf16 ? bf16_to_f32(f32_to_bf16(v)) : v)
            << (bf16 ? "bf16" : "fp32") << " token " << n;
      }
    }
  }
}

}  // namespace
}  // namespace kiln
