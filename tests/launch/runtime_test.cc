// WorkerContext::report(metrics, checkpoint_dir) and latest_checkpoint() in process: every rank
// a thread over one MemoryStore and a Gloo group. A commit is all or nothing; retention and
// metrics.jsonl follow.
#include "kiln/train/runtime.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <thread>

#include "common/temp_dir.h"
#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/comm/gloo_communicator.h"

namespace kiln {
namespace {

using std::chrono::milliseconds;

// Runs body(ctx) on two ranks sharing `run_dir`; returns each rank's exception text ("" if none).
std::vector<std::string> run_two(const fs::path& run_dir, int keep_last,
                                 const std::function<void(WorkerContext&)>& body) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::string> errors(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      try {
        GlooOptions o;
        o.timeout = milliseconds(20000);
        auto comm = make_gloo_communicator(store, r, 2, o);
        WorkerIdentity id;
        id.rank = r;
        id.world_size = 2;
        id.local_world_size = 2;
        WorkerContext ctx(id, *comm, run_dir, keep_last);
        body(ctx);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  return errors;
}

fs::path part_dir(const fs::path& base, int rank, const std::string& payload) {
  const fs::path d = base / ("scratch-" + std::to_string(rank));
  fs::remove_all(d);
  fs::create_directories(d / "sub");
  write_file_atomic(d / "state.txt", payload);
  write_file_atomic(d / "sub/more.txt", "rank " + std::to_string(rank));
  return d;
}

TEST(RuntimeReport, CommitsEveryPartAtomicallyAndKeepsTheNewest) {
  const fs::path d = testing::fresh_path("kiln_runtime_report");
  const fs::path run = d / "run";
  auto errors = run_two(run, 2, [&](WorkerContext& ctx) {
    EXPECT_FALSE(ctx.latest_checkpoint().has_value());
    for (int step = 1; step <= 3; ++step) {
      const fs::path mine =
          part_dir(d, ctx.identity().rank, fmt::format("{}:{}", ctx.identity().rank, step));
      const fs::path c = ctx.report({{"step", step}, {"loss", 1.0 / step}}, mine);
      EXPECT_EQ(c, run / fmt::format("checkpoints/step-{:08d}", step));
      EXPECT_EQ(ctx.latest_checkpoint(), c);
      EXPECT_EQ(read_file(ctx.checkpoint_part(c) / "state.txt"),
                fmt::format("{}:{}", ctx.identity().rank, step));
    }
    // Without "step": the newest + 1. A rank with nothing to save passes nullopt.
    const fs::path c4 = ctx.report(
        {{"loss", 0.1}},
        ctx.identity().rank == 0 ? std::optional<fs::path>(part_dir(d, 0, "x")) : std::nullopt);
    EXPECT_EQ(c4.filename(), "step-00000004");
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(run / "checkpoints"))
    names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-00000003", "step-00000004"}));  // keep_last 2
  EXPECT_EQ(read_file(run / "checkpoints/step-00000003/rank-00001/sub/more.txt"), "rank 1");
  EXPECT_FALSE(fs::exists(run / "checkpoints/step-00000004/rank-00001"));
  const Json m = read_json_file(run / "checkpoints/step-00000004/manifest.json");
  EXPECT_EQ(m.at("ranks_with_parts"), Json::array({0}));
  EXPECT_EQ(m.at("world_size"), 2);
  std::istringstream in(read_file(run / "metrics.jsonl"));
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    const Json j = parse_json(line, "metrics.jsonl");
    EXPECT_EQ(j.at("step").get<int>(), ++rows);
    EXPECT_TRUE(j.contains("checkpoint"));
  }
  EXPECT_EQ(rows, 4);
  fs::remove_all(d);
}

TEST(RuntimeReport, OneRankFailingCommitsNothingAndEveryRankNamesIt) {
  const fs::path d = testing::fresh_path("kiln_runtime_fail");
  const fs::path run = d / "run";
  auto errors = run_two(run, 0, [&](WorkerContext& ctx) {
    ctx.report({{"step", 1}}, part_dir(d, ctx.identity().rank, "ok"));
    // Rank 1's directory does not exist: step 2 must not appear, step 1 stays the newest.
    const fs::path mine =
        ctx.identity().rank == 1 ? d / "missing" : part_dir(d, ctx.identity().rank, "ok");
    ctx.report({{"step", 2}}, mine);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("checkpoint " + (run / "checkpoints/step-00000002").string() +
                             " not committed: rank 1 could not write its part"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
  EXPECT_NE(errors[1].find((d / "missing").string() + ": not a directory"), std::string::npos)
      << errors[1];
  EXPECT_FALSE(fs::exists(run / "checkpoints/step-00000002"));
  EXPECT_FALSE(fs::exists(run / "checkpoints/step-00000002.tmp"));
  EXPECT_TRUE(fs::exists(run / "checkpoints/step-00000001/manifest.json"));
  // Ranks that disagree on the step are refused before anything is written.
  errors = run_two(run, 0, [&](WorkerContext& ctx) {
    ctx.report({{"step", 5 + ctx.identity().rank}}, part_dir(d, ctx.identity().rank, "ok"));
  });
  EXPECT_NE(errors[0].find("ranks disagree on the step (from 5 to 6)"), std::string::npos)
      << errors[0];
  EXPECT_FALSE(fs::exists(run / "checkpoints/step-00000005"));
  // No run directory: a clear error.
  auto alone = make_local_communicator();
  WorkerContext none(WorkerIdentity{}, *alone);
  EXPECT_THROW(none.report({{"step", 1}}, d), Error);
  fs::remove_all(d);
}

}  // namespace
}  // namespace kiln
