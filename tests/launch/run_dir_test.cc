// A run's output.dir belongs to that run: a fresh run into a directory with checkpoints is
// refused (or starts over with output.overwrite=true), and train.resume=auto refuses another
// run's checkpoint, naming the key that changed. data.train as a list of files trains exactly
// as their concatenation in one file.
#include <gtest/gtest.h>

#include "common/run_kiln.h"
#include "common/run_losses.h"
#include "common/tiny_run.h"
#include "kiln/base/file.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::run_kiln;

std::string train(const fs::path& d, const std::string& overrides) {
  return "train " + (d / "recipe.yaml").string() + " dist.nproc_per_node=1 " + overrides;
}

std::vector<std::string> checkpoint_names(const fs::path& run) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(run / "checkpoints")) {
    if (e.path().filename().string().starts_with("step-")) out.push_back(e.path().filename());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(RunDir, AFreshRunIntoACheckpointedDirectoryIsRefused) {
  const fs::path d = testing::setup_tiny_run("kiln_run_dir", "refused", {64, 2, 2, 30});
  auto r = run_kiln(train(d, "checkpoint.every_steps=1"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string recipe = read_file(d / "run/recipe.yaml");
  r = run_kiln(train(d, "checkpoint.every_steps=1 optimizer.lr=1e-2"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("already holds checkpoints"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("output.overwrite=true"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(d / "run/recipe.yaml"), recipe) << "the refused run wrote its recipe";
  EXPECT_EQ(checkpoint_names(d / "run"),
            (std::vector<std::string>{"step-00000001", "step-00000002"}));
}

// Issue 34: the refusal came from every worker after the group formed, printed once per rank.
// The launcher says it before any worker starts, once.
TEST(RunDir, ACheckpointedDirectoryIsRefusedBeforeAnyWorkerStarts) {
  const fs::path d = testing::setup_tiny_run("kiln_run_dir", "early", {64, 1, 2, 30});
  auto r = run_kiln(train(d, "checkpoint.every_steps=1"));
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_kiln("train " + (d / "recipe.yaml").string() + " dist.nproc_per_node=2");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out, "kiln: error: output.dir " + (d / "run").string() +
                       " already holds checkpoints (newest: " +
                       (d / "run/checkpoints/step-00000001").string() +
                       "): train.resume=auto continues that run, output.overwrite=true deletes "
                       "them and starts over, or choose another output.dir\n");
}

TEST(RunDir, OverwriteDeletesTheOldCheckpointsAndStartsOver) {
  const fs::path d = testing::setup_tiny_run("kiln_run_dir", "overwrite", {64, 2, 2, 30});
  auto r = run_kiln(train(d, "checkpoint.every_steps=1"));
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_kiln(train(d, "output.overwrite=true train.max_steps=1"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("deleting"), std::string::npos) << r.out;
  EXPECT_EQ(checkpoint_names(d / "run"), std::vector<std::string>{"step-00000001"});
}

TEST(RunDir, ResumeAutoRefusesAnotherRunsCheckpointNamingTheKey) {
  const fs::path d = testing::setup_tiny_run("kiln_run_dir", "identity", {64, 2, 2, 30});
  auto r = run_kiln(train(d, ""));
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_kiln(train(d, "train.resume=auto train.max_steps=3 train.seed=9"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("train.seed was 0, is 9"), std::string::npos) << r.out;
  // A longer budget is the same run.
  r = run_kiln(train(d, "train.resume=auto train.max_steps=3"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
}

// The demo tokens split in two files, against the whole file: the same examples in the same
// order, so the same losses bit for bit (shuffled, packed, on two workers).
TEST(RunDir, TrainOnAListOfFilesIsTrainingOnTheirConcatenation) {
  const fs::path d = testing::setup_tiny_run("kiln_run_dir", "list", {64, 4, 2, 30});
  const std::string all = read_file(fs::path(KILN_SOURCE_DIR) / "assets/demo/tokens.jsonl");
  size_t cut = 0;
  for (int lines = 0; lines < 40; ++lines) cut = all.find('\n', cut) + 1;
  write_file_atomic(d / "a.jsonl", all.substr(0, cut));
  write_file_atomic(d / "b.jsonl", all.substr(cut));
  write_file_atomic(d / "ab.jsonl", all);
  const std::string common = " data.pack=true dist.nproc_per_node=2";
  auto r = run_kiln("train " + (d / "recipe.yaml").string() + common + " data.train=" +
                    (d / "ab.jsonl").string() + " output.dir=" + (d / "one").string());
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_kiln("train " + (d / "recipe.yaml").string() + common + " data.train=[" +
               (d / "a.jsonl").string() + "," + (d / "b.jsonl").string() +
               "] output.dir=" + (d / "two").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto one = testing::run_losses(d / "one");
  ASSERT_EQ(one.size(), 4u);
  EXPECT_EQ(testing::run_losses(d / "two"), one);
  // prepare-data reports each file.
  r = run_kiln("prepare-data " + (d / "recipe.yaml").string() + " data.train=[" +
               (d / "a.jsonl").string() + "," + (d / "b.jsonl").string() + "]");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("a.jsonl: 40 examples"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("b.jsonl: "), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kiln
