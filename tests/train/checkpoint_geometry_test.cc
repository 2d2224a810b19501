// Checkpoints across shard geometries: shards are element ranges of the unpadded units, recorded
// in each shard file, and loading assembles this rank's ranges from whichever old shards overlap
// them. So a checkpoint written before FSDP sharded the (V, C) tables by whole rows (element-wise
// shards, which cut rows) loads into today's whole-row shards at any world size, and one written
// today reshards to any other world size. Ranks are threads; every value is a function of its
// unit, element and tensor, so each rank's loaded shard is checked element by element.
//
// tests/fixtures/ckpt_elementwise_v4 is such an old checkpoint (format 4): written at commit
// 04fcf7a by save_checkpoint over 3 ranks under full_shard with the values of fixture_value(), for
// fixture_config() (see its README).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/rank_threads.h"
#include "common/small_model.h"
#include "common/temp_dir.h"
#include "common/test_backend.h"
#include "kiln/base/file.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/store.h"
#include "kiln/fsdp/fsdp.h"
#include "kiln/io/safetensors.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/optimizer.h"

namespace kiln {
namespace {

// One layer, tied; a vocabulary of 37 rows of 16, so that element-wise shards over 2 or 3 ranks
// cut rows (592 / 3 -> shards of 198 elements).
ModelConfig fixture_config() {
  ModelConfig c = testing::small_config(true);
  c.vocab_size = 37;
  c.num_hidden_layers = 1;
  return c;
}

// Element i of `unit`'s tensor kind (0 params, 1 m, 2 v): exact in fp32.
float fixture_value(int unit, size_t i, int kind) {
  return static_cast<float>(unit * 100000 + static_cast<int>(i)) + 0.25f * static_cast<float>(kind);
}

const char* const kKinds[] = {"params", "m", "v"};

fs::path fixture_dir() { return fs::path(KILN_SOURCE_DIR) / "tests/fixtures/ckpt_elementwise_v4"; }

// Runs body(rank, layout, communicator, fsdp, optimizer) on every rank of `world` (threads): a
// full_shard Fsdp and an Optimizer over the fixture's layout.
template <typename Body>
void on_ranks(int world, Body body) {
  const ParamLayout layout(fixture_config());
  const Backend& be = testing::cpu_fp32();
  auto store = std::make_shared<MemoryStore>();
  testing::run_rank_threads(world, [&](int r) {
    auto comm = make_gloo_communicator(store, r, world, GlooOptions{});
    Fsdp fsdp(layout, be, ShardStrategy::kFullShard, *comm, nullptr);
    Optimizer opt(OptimizerSettings{}, layout, fsdp.shard_ranges(), be);
    body(r, layout, *comm, fsdp, opt);
  });
}

// Every rank of `world` loads `dir` into its own shards and checks each element of its ranges.
void load_and_check(const fs::path& dir, int world) {
  on_ranks(world,
           [&](int r, const ParamLayout& layout, Communicator& comm, Fsdp& fsdp, Optimizer& opt) {
             const CheckpointState st = load_checkpoint(dir, layout, fsdp, opt, comm);
             EXPECT_EQ(st.step, 7);
             EXPECT_EQ(opt.step_count(), 7);
             const auto ranges = fsdp.shard_ranges();
             for (int u = 0; u < layout.num_units(); ++u) {
               const float* got[] = {fsdp.shard_params(u), opt.m(u).data(), opt.v(u).data()};
               size_t wrong = 0;
               for (int k = 0; k < 3; ++k) {
                 for (size_t i = ranges[u].begin; i < ranges[u].end; ++i) {
                   wrong += got[k][i - ranges[u].begin] != fixture_value(u, i, k);
                 }
               }
               EXPECT_EQ(wrong, 0u) << "rank " << r << " of " << world << ", unit " << u;
             }
           });
}

// Writes the values of fixture_value() as a checkpoint of step 7 over `world` ranks.
void write_checkpoint(const fs::path& root, int world) {
  on_ranks(world,
           [&](int, const ParamLayout& layout, Communicator& comm, Fsdp& fsdp, Optimizer& opt) {
             const auto ranges = fsdp.shard_ranges();
             opt.set_step_count(7);
             for (int u = 0; u < layout.num_units(); ++u) {
               float* dst[] = {fsdp.shard_params(u), opt.m(u).data(), opt.v(u).data()};
               for (int k = 0; k < 3; ++k) {
                 for (size_t i = ranges[u].begin; i < ranges[u].end; ++i) {
                   dst[k][i - ranges[u].begin] = fixture_value(u, i, k);
                 }
               }
             }
             CheckpointState st;
             st.step = 7;
             st.strategy = "full_shard";
             st.recipe_yaml = "# checkpoint_geometry_test\n";
             st.model_config = Json::object();
             save_checkpoint(root, st, layout, fsdp, opt, comm, true);
           });
}

// The shard files cut rows (the fixture is what the old geometry wrote), and every element of
// the checkpoint lands where today's whole-row shards put it, at any world size.
TEST(CheckpointGeometry, LoadsACheckpointWrittenBeforeWholeRowShards) {
  const fs::path dir = fixture_dir() / "step-00000007";
  SafetensorsFile second(dir / "rank-00001-of-00003.safetensors");
  const size_t begin = std::stoull(second.metadata().at("u0.begin"));
  EXPECT_NE(begin % 16, 0u) << "the fixture's embedding shard starts inside a row";
  for (int world : {1, 2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    load_and_check(dir, world);
  }
}

// Today's shards of the embedding hold whole rows; a checkpoint of 3 ranks loads on 2 and 1 and
// one of 2 on 3.
TEST(CheckpointGeometry, WholeRowShardsReshardToAnyWorldSize) {
  for (int from : {3, 2}) {
    const testing::TempDir root("kiln_geometry", "from" + std::to_string(from));
    write_checkpoint(root.path(), from);
    const fs::path dir = root / "step-00000007";
    for (int r = 0; r < from; ++r) {
      SafetensorsFile f(dir / fmt::format("rank-{:05}-of-{:05}.safetensors", r, from));
      EXPECT_EQ(std::stoull(f.metadata().at("u0.begin")) % 16, 0u) << "rank " << r;
    }
    for (int world : {1, 2, 3}) {
      if (world == from) continue;
      SCOPED_TRACE("from " + std::to_string(from) + " to " + std::to_string(world));
      load_and_check(dir, world);
    }
  }
}

}  // namespace
}  // namespace kiln
