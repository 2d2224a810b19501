// Nothing a user does by habit loses a run or trains a wrong model silently: re-running a
// finished run, overwriting a run the recipe reads from, a crash while a step is committed again
// or while old checkpoints are pruned, a data file replaced between runs, a resume on another
// number of workers, data where nothing takes loss, a learning rate float32 cannot hold, and
// settings far beyond the machine. Each case runs the real binary.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "common/run_kiln.h"
#include "common/run_losses.h"
#include "common/tiny_run.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::run_kiln;

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// One process (the recipe's two workers only where a test asks for them).
std::string train(const fs::path& d, const std::string& overrides) {
  return "train " + (d / "recipe.yaml").string() + " dist.nproc_per_node=1 " + overrides;
}

fs::path ckpt(const fs::path& d, int64_t step) {
  return d / "run/checkpoints" / fmt::format("step-{:08d}", step);
}

// Every entry of <run>/checkpoints: only complete checkpoints may be left.
std::vector<std::string> checkpoint_entries(const fs::path& d) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(d / "run/checkpoints")) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

size_t lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

// output.overwrite=true with model.path inside output.dir/final: refused before anything is
// deleted, in one line naming the key.
TEST(Habits, OverwriteNeverDeletesItsOwnInput) {
  const fs::path d = testing::setup_tiny_run("kiln_habits", "overwrite", {64, 2, 2, 30});
  auto r = run_kiln(train(d, ""));
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_kiln(train(d, "output.overwrite=true model.path=" + (d / "run/final").string()));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "kiln: error: output.overwrite=true would delete " +
                        (d / "run/final").string() + " of the previous run, but model.path " +
                        (d / "run/final").string() + " is inside it: nothing was deleted");
  EXPECT_EQ(lines(r.out), 1u) << r.out;
  EXPECT_TRUE(fs::exists(ckpt(d, 2) / "manifest.json"));
  EXPECT_TRUE(fs::exists(d / "run/final/model.safetensors"));
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// A step committed again (a resume from an older checkpoint reaches it) is replaced without a
// moment where neither copy exists: killed between its renames (KILN_FAULT ...@commit), the run
// leaves the old copy aside and the new one committed under its temporary name, and
// train.resume=auto completes the commit and continues from that step, not from an older one.
TEST(Habits, ARecommittedStepSurvivesACrashBetweenItsRenames) {
  const fs::path d = testing::setup_tiny_run("kiln_habits", "recommit", {64, 4, 2, 30});
  const std::string every = "checkpoint.every_steps=2 checkpoint.keep_last=0 ";
  auto r = run_kiln(train(d, every));
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_kiln(train(d, every + "train.resume=" + ckpt(d, 2).string()),
               "KILN_FAULT=0:4:kill@commit");
  EXPECT_HAS(r.out, "injecting 'kill' at step 4 (commit)");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(ckpt(d, 4).string() + ".tmp/manifest.json")) << r.out;
  EXPECT_TRUE(fs::exists(ckpt(d, 4).string() + ".old/manifest.json")) << r.out;
  r = run_kiln(train(d, every + "train.resume=auto"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "completed the interrupted commit of " + ckpt(d, 4).string());
  EXPECT_HAS(r.out, "resumed from " + ckpt(d, 4).string() + " (step 4)");
  EXPECT_EQ(checkpoint_entries(d), (std::vector<std::string>{"step-00000002", "step-00000004"}));
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// Running a finished run again trains nothing, rewrites no checkpoint (the old one would get a
// manifest loss of 0.0 that then wins under keep_best) and exits 0; a final/ that a crash kept
// from being written is exported from the last checkpoint, byte for byte what it would have been.
TEST(Habits, ARerunOfAFinishedRunChangesNothing) {
  const fs::path d = testing::setup_tiny_run("kiln_habits", "rerun", {64, 3, 2, 30});
  auto r = run_kiln(train(d, ""));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string manifest = read_file(ckpt(d, 3) / "manifest.json");
  const std::string metrics = read_file(d / "run/metrics.jsonl");
  const std::string weights = read_file(d / "run/final/model.safetensors");
  r = run_kiln(train(d, "train.resume=auto"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "kiln: nothing to do: " + (d / "run").string() + " is at step 3, its last");
  EXPECT_EQ(r.out.find("trained 0 steps"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(ckpt(d, 3) / "manifest.json"), manifest);
  EXPECT_EQ(read_file(d / "run/metrics.jsonl"), metrics);
  fs::remove_all(d / "run/final");
  r = run_kiln(train(d, "train.resume=auto"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "exporting the missing final model");
  EXPECT_TRUE(read_file(d / "run/final/model.safetensors") == weights);
  EXPECT_EQ(read_file(ckpt(d, 3) / "manifest.json"), manifest);
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// A kill while retention deletes an old checkpoint (KILN_FAULT ...@prune: renamed, not yet
// deleted) leaves nothing that is never pruned: the resumed run's retention removes it.
TEST(Habits, AKillWhilePruningLeavesNothingBehind) {
  const fs::path d = testing::setup_tiny_run("kiln_habits", "prune", {64, 6, 2, 30});
  const std::string keep = "checkpoint.every_steps=1 checkpoint.keep_last=1 ";
  auto r = run_kiln(train(d, keep + "checkpoint.background=false"), "KILN_FAULT=0:3:kill@prune");
  EXPECT_HAS(r.out, "injecting 'kill' at step 3 (prune)");
  EXPECT_NE(r.code, 0) << r.out;
  r = run_kiln(train(d, keep + "train.resume=auto"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "resumed from " + ckpt(d, 3).string());
  EXPECT_EQ(checkpoint_entries(d), std::vector<std::string>{"step-00000006"});
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// A data file replaced between runs (the same number of lines) is refused on resume, naming the
// file and both fingerprints; data.allow_changed=true resumes regardless, with a warning.
TEST(Habits, AReplacedDataFileIsRefusedOnResume) {
  const fs::path d = testing::setup_tiny_run("kiln_habits", "changed", {64, 2, 2, 30});
  const std::string demo = read_file(fs::path(KILN_SOURCE_DIR) / "assets/demo/tokens.jsonl");
  const fs::path data = d / "data.jsonl";
  write_file_atomic(data, demo);
  auto r = run_kiln(train(d, "data.train=" + data.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  // The first two lines swapped: as many lines and bytes, other contents.
  const size_t a = demo.find('\n') + 1, b = demo.find('\n', a) + 1;
  write_file_atomic(data, demo.substr(a, b - a) + demo.substr(0, a) + demo.substr(b));
  const std::string resume = "data.train=" + data.string() + " train.resume=auto train.max_steps=3";
  r = run_kiln(train(d, resume));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "kiln: error: train.resume: data.train file " + data.string() +
                        " changed since checkpoint " + ckpt(d, 2).string() + " (it had " +
                        std::to_string(demo.size()) + " bytes, xxh3 ");
  EXPECT_HAS(r.out, "data.allow_changed=true");
  r = run_kiln(train(d, resume + " data.allow_changed=true"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "continuing (data.allow_changed=true)");
  EXPECT_HAS(r.out, "resumed from " + ckpt(d, 2).string());
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// A checkpoint written under the older hold-out rule (per listing of a file: its manifest records
// no holdout_rule) is refused on resume of a data.eval_split run, whose training set would differ;
// data.allow_changed=true resumes regardless, with a warning.
TEST(Habits, AnOlderHoldOutRuleIsRefusedOnResume) {
  const fs::path d = testing::setup_tiny_run("kiln_habits", "holdout", {64, 2, 2, 30});
  const std::string split = "data.eval_split=0.1 ";
  auto r = run_kiln(train(d, split));
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path manifest = ckpt(d, 2) / "manifest.json";
  Json m = read_json_file(manifest);
  ASSERT_EQ(m.at("holdout_rule"), 2);
  m.erase("holdout_rule");
  write_file_atomic(manifest, m.dump(1));
  const std::string resume = split + "train.resume=auto train.max_steps=3";
  r = run_kiln(train(d, resume));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "kiln: error: train.resume: checkpoint " + ckpt(d, 2).string() +
                        " held out data.eval_split's examples by rule 1");
  r = run_kiln(train(d, resume + " data.allow_changed=true"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "continuing (data.allow_changed=true)");
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// 32 examples of distinct lengths (example i predicts i + 1 tokens), so each step's target count
// says which examples it took.
fs::path numbered_data(const fs::path& d) {
  std::string text;
  for (int i = 0; i < 32; ++i) {
    std::vector<int> ids;
    for (int t = 0; t < i + 2; ++t) ids.push_back(1 + (i * 7 + t) % 1000);
    text += fmt::format("{{\"input_ids\": [{}]}}\n", fmt::join(ids, ", "));
  }
  write_file_atomic(d / "numbered.jsonl", text);
  return d / "numbered.jsonl";
}

std::vector<int64_t> step_targets(const fs::path& run) {
  std::vector<int64_t> out;
  for (const Json& row : testing::run_metric_rows(run))
    out.push_back(row.at("targets").get<int64_t>());
  return out;
}

// Saved and resumed on 1, then 2, then 4, then 1 worker, the run takes the examples of an
// uninterrupted run in the same order: every example once per epoch. (The data position is the
// group's, not each rank's.)
TEST(Habits, ResumeOnOneTwoFourOneWorkersTakesTheUninterruptedOrder) {
  const fs::path d = testing::setup_tiny_run("kiln_habits", "worlds", {64, 4, 1, 60});
  const std::string base = "train " + (d / "recipe.yaml").string() +
                           " data.train=" + numbered_data(d).string() +
                           " train.micro_batch_size=1 ";
  auto full = run_kiln(
      base + "dist.nproc_per_node=1 train.max_steps=36 output.dir=" + (d / "full").string());
  ASSERT_EQ(full.code, 0) << full.out;
  const std::vector<int64_t> one = step_targets(d / "full");  // one example a step
  ASSERT_EQ(one.size(), 36u);
  std::vector<int64_t> expected;
  size_t next = 0;
  const auto take = [&](int world, int steps) {
    for (int s = 0; s < steps; ++s) {
      int64_t sum = 0;
      for (int w = 0; w < world; ++w) sum += one[next++];
      expected.push_back(sum);
    }
  };
  int64_t step = 0;
  for (const auto& [world, steps] :
       std::vector<std::pair<int, int>>{{1, 4}, {2, 2}, {4, 2}, {1, 20}}) {
    step += steps;
    auto r =
        run_kiln(base + fmt::format("dist.nproc_per_node={} train.max_steps={} ", world, step) +
                 "train.resume=auto output.dir=" + (d / "run").string());
    ASSERT_EQ(r.code, 0) << r.out;
    take(world, steps);
  }
  EXPECT_EQ(step_targets(d / "run"), expected);
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// Data where nothing takes loss trains at loss 0.0 and changes nothing; evaluation data without a
// target divides by zero at the end. Both are refused before step 1, with the counts.
TEST(Habits, DataWithoutASingleTargetIsRefusedBeforeStepOne) {
  const fs::path d = testing::setup_tiny_run("kiln_habits", "masked", {64, 2, 2, 30});
  write_file_atomic(d / "masked.jsonl",
                    "{\"input_ids\": [1, 2, 3], \"labels\": [-100, -100, -100]}\n"
                    "{\"input_ids\": [4, 5], \"labels\": [4, -100]}\n");
  auto r = run_kiln(train(d, "data.train=" + (d / "masked.jsonl").string()));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "kiln: error: data.train: 2 examples and 0 predicted tokens in ");
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(d / "run/final"));
  r = run_kiln(train(d, "data.eval=" + (d / "masked.jsonl").string()));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "kiln: error: data.eval: " + (d / "masked.jsonl").string() +
                        " has 2 examples and 0 predicted tokens");
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// optimizer.lr=3e38 fits a float32, but AdamW's first step size lr / (1 - beta1) does not: the
// update makes every weight non-finite. The step stops the run like a non-finite gradient norm,
// and no final/ of non-finite weights is written.
TEST(Habits, AnUpdateThatMakesWeightsNonFiniteStopsTheRun) {
  const fs::path d = testing::setup_tiny_run("kiln_habits", "nonfinite", {64, 1, 2, 30});
  auto r = run_kiln(train(d, "optimizer.lr=3e38"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "kiln: error: step 1: the update made weights non-finite");
  EXPECT_FALSE(fs::exists(d / "run/final")) << r.out;
  r = run_kiln(train(d, "optimizer.lr=1e39"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "optimizer.lr: must be in (0, 3.4028235e+38] (a float32), got 1e39");
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// Settings far beyond the machine fail at start in one line naming the key and the limit, not
// with a crash in libgomp or std::bad_alloc.
TEST(Habits, SettingsBeyondTheMachineAreRefusedNamingTheLimit) {
  const fs::path d = testing::setup_tiny_run("kiln_habits", "bounds", {64, 1, 2, 30});
  auto r = run_kiln(train(d, "dist.threads_per_worker=100000"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "kiln: error: dist.threads_per_worker is 100000; at most ");
  EXPECT_EQ(lines(r.out), 1u) << r.out;
  r = run_kiln(train(d, "train.grad_accum_steps=1000000000"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "train.grad_accum_steps may be at most ");
  EXPECT_EQ(lines(r.out), 1u) << r.out;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

}  // namespace
}  // namespace kiln
