// The shard geometry's contract (fsdp/shard_geometry.h), stated directly: behaviour tests see
// the same geometry on every side (a padding row more per shard changes no loss or gradient), so
// only a test of the numbers themselves notices a change in them.
//   - a (V, C) table: rank r of S holds rows [r * ceil(V / S), (r + 1) * ceil(V / S)) ∩ [0, V);
//     shard_size = ceil(V / S) * C and padded = S * shard_size;
//   - any other unit of n floats: shard_size = ceil(n / S), padded = S * shard_size, the least
//     multiple of S not below n.
// And Fsdp's shard_ranges read it: at three ranks, each rank's range of a table is its rows.
#include "kiln/fsdp/shard_geometry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/rank_threads.h"
#include "common/small_model.h"
#include "common/test_backend.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/store.h"
#include "kiln/fsdp/fsdp.h"
#include "kiln/model/decoder.h"

namespace kiln {
namespace {

ParamUnit table(size_t V, size_t C) {
  ParamUnit u;
  u.name = "table";
  u.numel = V * C;
  u.row_width = C;
  return u;
}

ParamUnit flat(size_t n) {
  ParamUnit u;
  u.name = "flat";
  u.numel = n;
  return u;
}

TEST(ShardGeometry, ATableIsCutIntoCeilVOverSRowsPerRank) {
  struct Case {
    size_t V, C, S, rows_per_rank;
  };
  // Rows that divide, that do not, fewer rows than ranks, one rank.
  for (const Case c :
       {Case{300, 16, 3, 100}, Case{301, 16, 3, 101}, Case{301, 16, 2, 151}, Case{9, 4, 4, 3},
        Case{3, 8, 4, 1}, Case{151936, 896, 8, 18992}, Case{7, 5, 1, 7}}) {
    const std::string what =
        "V=" + std::to_string(c.V) + " C=" + std::to_string(c.C) + " S=" + std::to_string(c.S);
    const ShardGeometry g = shard_geometry(table(c.V, c.C), c.S);
    EXPECT_EQ(g.shard_size, c.rows_per_rank * c.C) << what;
    EXPECT_EQ(g.padded, c.S * c.rows_per_rank * c.C) << what;
    // Padding is less than one row per rank: the last rank's rows end at V, or it holds none.
    EXPECT_LT(g.padded - c.V * c.C, c.S * c.C) << what;
    for (size_t r = 0; r < c.S; ++r) {
      const size_t first = std::min(c.V, r * c.rows_per_rank);
      const size_t end = std::min(c.V, (r + 1) * c.rows_per_rank);
      EXPECT_EQ(std::min(c.V * c.C, r * g.shard_size), first * c.C) << what << " rank " << r;
      EXPECT_EQ(std::min(c.V * c.C, (r + 1) * g.shard_size), end * c.C) << what << " rank " << r;
    }
  }
}

TEST(ShardGeometry, OtherUnitsArePaddedToAMultipleOfS) {
  struct Case {
    size_t n, S, shard_size;
  };
  for (const Case c : {Case{12, 3, 4}, Case{13, 3, 5}, Case{1, 4, 1}, Case{1003, 8, 126},
                       Case{1024, 8, 128}, Case{5, 1, 5}}) {
    const std::string what = "n=" + std::to_string(c.n) + " S=" + std::to_string(c.S);
    const ShardGeometry g = shard_geometry(flat(c.n), c.S);
    EXPECT_EQ(g.shard_size, c.shard_size) << what;
    EXPECT_EQ(g.padded, c.S * c.shard_size) << what;
    EXPECT_GE(g.padded, c.n) << what;
    EXPECT_LT(g.padded - c.n, c.S) << what;  // the least multiple of S not below n
  }
}

// Fsdp reads the geometry: at three ranks, the embedding (301 rows of 16) of rank r is rows
// [101 r, 101 (r + 1)) ∩ [0, 301), and a flat unit's range is [r ceil(n / 3), ...) ∩ [0, n).
TEST(ShardGeometry, FsdpShardRangesAreTheRanksRows) {
  ModelConfig c = testing::small_config(false);
  c.vocab_size = 301;
  c.num_hidden_layers = 1;
  const int S = 3;
  auto store = std::make_shared<MemoryStore>();
  testing::run_rank_threads(S, [&](int r) {
    auto comm = make_gloo_communicator(store, r, S, GlooOptions{});
    Decoder model(c, testing::cpu_fp32());
    Fsdp fsdp(model.layout(), testing::cpu_fp32(), ShardStrategy::kFullShard, *comm, nullptr);
    const std::vector<ShardRange> ranges = fsdp.shard_ranges();
    const size_t C = static_cast<size_t>(c.hidden_size), rr = static_cast<size_t>(r), kS = S;
    for (int u = 0; u < fsdp.num_units(); ++u) {
      const ParamUnit& unit = model.layout().units()[u];
      const size_t n = unit.numel;
      const size_t step = unit.row_width > 0 ? C : 1;
      if (unit.row_width > 0) {
        EXPECT_EQ(unit.row_width, C) << unit.name;
      }
      const size_t per_rank = (n / step + kS - 1) / kS * step;
      EXPECT_EQ(ranges[u].begin, std::min(n, rr * per_rank)) << unit.name << " rank " << r;
      EXPECT_EQ(ranges[u].end, std::min(n, (rr + 1) * per_rank)) << unit.name << " rank " << r;
    }
    const int embed = model.layout().embed_unit();
    EXPECT_EQ(ranges[embed].begin, std::min<size_t>(301, 101 * rr) * C) << "rank " << r;
    EXPECT_EQ(ranges[embed].end, std::min<size_t>(301, 101 * (rr + 1)) * C) << "rank " << r;
  });
}

}  // namespace
}  // namespace kiln
