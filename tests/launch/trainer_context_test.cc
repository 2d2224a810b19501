// The trainer as one client of the runtime API (train(recipe, ctx)), its two ranks as threads of
// this process over one MemoryStore: what it tells each rank's WorkerContext (the step signals
// the hang watchdog hears), the run's one metrics.jsonl writer, and a stop one rank asks for.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include "common/rank_threads.h"
#include "common/tiny_run.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/train/recipe.h"
#include "kiln/train/runtime.h"
#include "kiln/train/trainer.h"

namespace kiln {
namespace {

constexpr int kWorld = 2;

WorkerIdentity rank_of_two(int rank) {
  WorkerIdentity id;
  id.rank = id.local_rank = rank;
  id.world_size = id.local_world_size = kWorld;
  return id;
}

// Runs body(ctx) on each rank of a two-rank group whose contexts' run directory is `run_dir`.
void run_two(const fs::path& run_dir, const std::function<void(WorkerContext&)>& body) {
  auto store = std::make_shared<MemoryStore>();
  testing::run_rank_threads(kWorld, [&](int rank) {
    auto comm = make_gloo_communicator(store, rank, kWorld, GlooOptions{});
    WorkerContext ctx(rank_of_two(rank), *comm, run_dir);
    body(ctx);
  });
}

std::vector<Json> metrics_rows(const fs::path& file) {
  std::vector<Json> rows;
  std::istringstream in(read_file(file));
  for (std::string line; std::getline(in, line);) rows.push_back(parse_json(line, file.string()));
  return rows;
}

using Heard = std::vector<std::pair<int64_t, bool>>;  // (step, began), in order

Heard every_step(int64_t steps) {
  Heard h;
  for (int64_t s = 1; s <= steps; ++s) {
    h.emplace_back(s, true);
    h.emplace_back(s, false);
  }
  return h;
}

// Every rank, not only rank 0 (which writes metrics), tells its step listener that each step
// began and ended; metrics.jsonl gets each step's row once, between the rows the function
// reports itself before and after train().
TEST(TrainerContext, EveryRankEndsEveryStepAndMetricsHaveOneWriter) {
  const fs::path d = testing::setup_tiny_run("kiln_trainer_ctx", "steps", {.max_steps = 4});
  const Recipe r = load_recipe(d / "recipe.yaml");
  std::vector<Heard> heard(kWorld);
  run_two(r.output.dir, [&](WorkerContext& ctx) {
    const int rank = ctx.identity().rank;
    ctx.step_listener = [&heard, rank](int64_t step, bool began) {
      heard[rank].emplace_back(step, began);
    };
    if (rank == 0) ctx.report({{"event", "start"}});
    const TrainResult res = train(r, ctx);
    EXPECT_EQ(res.steps, 4);
    if (rank == 0) ctx.report({{"event", "end"}});
  });
  for (int rank = 0; rank < kWorld; ++rank) EXPECT_EQ(heard[rank], every_step(4)) << rank;
  const std::vector<Json> rows = metrics_rows(fs::path(r.output.dir) / "metrics.jsonl");
  ASSERT_EQ(rows.size(), 6u) << read_file(fs::path(r.output.dir) / "metrics.jsonl");
  EXPECT_EQ(rows.front(), (Json{{"event", "start"}}));
  for (int s = 1; s <= 4; ++s) {
    EXPECT_EQ(rows[s].at("step"), s);
    EXPECT_TRUE(rows[s].contains("loss"));
  }
  EXPECT_EQ(rows.back(), (Json{{"event", "end"}}));
  fs::remove_all(d);
}

// A stop only rank 1 asks for (at the start of step 2) is every rank's: all stop after step 2
// with its checkpoint committed and no final model.
TEST(TrainerContext, AStopOneRankAsksForStopsEveryRankAfterTheSameStep) {
  const fs::path d = testing::setup_tiny_run("kiln_trainer_ctx", "stop", {.max_steps = 6});
  const Recipe r = load_recipe(d / "recipe.yaml");
  std::vector<TrainResult> results(kWorld);
  std::vector<Heard> heard(kWorld);
  run_two(r.output.dir, [&](WorkerContext& ctx) {
    const int rank = ctx.identity().rank;
    ctx.step_listener = [&, rank](int64_t step, bool began) {
      heard[rank].emplace_back(step, began);
      if (rank == 1 && step == 2 && began) ctx.request_stop();
    };
    results[rank] = train(r, ctx);
  });
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_TRUE(results[rank].stopped) << rank;
    EXPECT_EQ(results[rank].steps, 2) << rank;
    EXPECT_EQ(heard[rank], every_step(2)) << rank;
  }
  const fs::path run = r.output.dir;
  EXPECT_TRUE(fs::exists(run / "checkpoints/step-00000002/manifest.json"));
  EXPECT_FALSE(fs::exists(run / "final"));
  EXPECT_EQ(metrics_rows(run / "metrics.jsonl").size(), 2u);
  fs::remove_all(d);
}

}  // namespace
}  // namespace kiln
