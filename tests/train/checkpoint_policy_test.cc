// Retention by metric (keep_last + keep_best over the manifests' metrics) and the split of an
// evaluation set into per-rank batches, without training.
#include <gtest/gtest.h>

#include <set>

#include "common/temp_dir.h"
#include "kiln/base/file.h"
#include "kiln/data/batch.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/train_data.h"

namespace kiln {
namespace {

class CheckpointPolicy : public ::testing::Test {
 protected:
  // A committed checkpoint directory with only a manifest (enough for listing and retention).
  void make(int64_t step, const Json& metrics) {
    const fs::path d = root_ / checkpoint_dir_name(step);
    fs::create_directories(d);
    write_file_atomic(d / "manifest.json", Json{{"step", step}, {"metrics", metrics}}.dump());
  }
  std::set<std::string> kept() const { return testing::entry_names(root_); }
  testing::TempDir tmp_{"kiln_ckpt_policy"};
  const fs::path root_ = tmp_.path();
};

TEST_F(CheckpointPolicy, KeepBestKeepsTheBestByTheMetricBesidesTheNewest) {
  make(5, {{"loss", 3.0}, {"eval_loss", 2.5}});
  make(10, {{"loss", 2.0}, {"eval_loss", 2.1}});
  make(15, {{"loss", 1.5}});  // no evaluation at this step: does not compete on eval_loss
  make(20, {{"loss", 1.0}, {"eval_loss", 2.3}});
  make(25, {{"loss", 1.2}, {"eval_loss", 2.4}});
  fs::create_directories(root_ / "step-00000030.tmp");  // torn save: never a checkpoint
  EXPECT_EQ(best_checkpoints(root_, 2, "eval_loss", false),
            (std::vector<fs::path>{root_ / "step-00000010", root_ / "step-00000020"}));
  EXPECT_EQ(best_checkpoints(root_, 1, "eval_loss", true),
            (std::vector<fs::path>{root_ / "step-00000005"}));
  EXPECT_EQ(best_checkpoints(root_, 9, "loss", false).size(), 5u);
  EXPECT_TRUE(best_checkpoints(root_, 3, "accuracy", true).empty());

  RetentionPolicy p;
  p.keep_last = 1;
  p.keep_best = 2;
  p.best_metric = BestMetric::kEvalLoss;
  apply_retention(root_, p);
  EXPECT_EQ(kept(), (std::set<std::string>{"step-00000010", "step-00000020", "step-00000025"}));
  // By loss, highest first: step 10 (2.0) of those left, besides the newest.
  make(30, {{"loss", 0.5}});
  p.keep_best = 1;
  p.best_metric = BestMetric::kLoss;
  p.maximize = true;
  apply_retention(root_, p);
  EXPECT_EQ(kept(), (std::set<std::string>{"step-00000010", "step-00000030"}));
}

TEST_F(CheckpointPolicy, KeepLastZeroKeepsEverything) {
  for (int s = 1; s <= 4; ++s) make(s, {{"loss", 1.0 * s}});
  RetentionPolicy p;
  p.keep_last = 0;
  p.keep_best = 1;
  p.best_metric = BestMetric::kLoss;
  apply_retention(root_, p);
  EXPECT_EQ(kept().size(), 4u);
}

// What each crash between a commit's or a prune's steps leaves, and what recover_checkpoints()
// makes of it: one whole copy of every committed step, nothing half deleted.
TEST_F(CheckpointPolicy, RecoveryLeavesOneWholeCopyOfEveryCommittedStep) {
  const auto put = [&](const std::string& name, double loss) {
    fs::create_directories(root_ / name);
    write_file_atomic(root_ / name / "manifest.json",
                      Json{{"step", 0}, {"metrics", {{"loss", loss}}}}.dump());
  };
  put("step-00000005.old", 1.0);  // killed between the renames of a recommit: both whole
  put("step-00000005.tmp", 2.0);
  put("step-00000006.old", 1.0);  // only the old one (its replacement never committed)
  put("step-00000007", 2.0);      // killed while removing the old copy
  put("step-00000007.old", 1.0);
  put("step-00000008.tmp", 2.0);                        // a first commit killed before its rename
  fs::create_directories(root_ / "step-00000009.tmp");  // a save that never committed
  put("step-00000003.del", 1.0);                        // killed while pruning
  fs::create_directories(root_ / "step-00000002");      // an older kiln killed while pruning
  write_file_atomic(root_ / "step-00000002/rank-00000-of-00001.safetensors", "x");
  EXPECT_EQ(list_checkpoints(root_).size(), 1u);  // only step 7 has its final name and manifest
  const std::vector<std::string> done = recover_checkpoints(root_);
  EXPECT_EQ(done.size(), 4u);
  EXPECT_EQ(kept(), (std::set<std::string>{"step-00000005", "step-00000006", "step-00000007",
                                           "step-00000008", "step-00000009.tmp"}));
  const auto loss = [&](int64_t step) {
    return read_json_file(root_ / checkpoint_dir_name(step) / "manifest.json")["metrics"]["loss"];
  };
  EXPECT_EQ(loss(5), 2.0);  // the new copy, committed
  EXPECT_EQ(loss(6), 1.0);
  EXPECT_EQ(loss(7), 2.0);
  EXPECT_EQ(list_checkpoints(root_).size(), 4u);
  prune_checkpoints(root_, 2);
  EXPECT_EQ(kept(), (std::set<std::string>{"step-00000007", "step-00000008"}));
}

TEST_F(CheckpointPolicy, CommittingAStepAgainReplacesIt) {
  const fs::path final_dir = root_ / checkpoint_dir_name(4);
  for (const char* loss : {"1", "2"}) {
    const fs::path tmp = root_ / (checkpoint_dir_name(4) + ".tmp");
    fs::create_directories(tmp);
    write_file_atomic(tmp / "rank-00000-of-00001.safetensors", loss);
    commit_checkpoint_dir(tmp, final_dir, root_, {{"manifest.json", "{}"}}, 4);
  }
  EXPECT_EQ(read_file(final_dir / "rank-00000-of-00001.safetensors"), "2");
  EXPECT_EQ(kept(), std::set<std::string>{"step-00000004"});
}

// Example i has i + 2 tokens, all predicted.
class Examples : public ExampleSource {
 public:
  explicit Examples(size_t n) {
    for (size_t i = 0; i < n; ++i) ids_.emplace_back(i + 2, static_cast<int32_t>(i));
  }
  size_t size() const override { return ids_.size(); }
  ExampleView example(size_t i) const override { return {ids_[i], ids_[i]}; }
  const std::string& what() const override { return name_; }

 private:
  std::vector<std::vector<int32_t>> ids_;
  std::string name_ = "examples";
};

TEST(EvalBatches, SplitsInFileOrderAcrossRanksWithEqualRounds) {
  const Examples data(7);  // batches of 2: {0,1} {2,3} {4,5} {6}
  const EvalBatches r0(data, 2, 0, 3, 0), r1(data, 2, 1, 3, 0), r2(data, 2, 2, 3, 0);
  ASSERT_EQ(r0.rounds(), 2);
  ASSERT_EQ(r1.rounds(), 2);
  ASSERT_EQ(r2.rounds(), 2);
  Batch b;
  r0.fill(0, b);  // examples 0, 1: rows as long as the longest (3 tokens)
  EXPECT_EQ(b.B, 2);
  EXPECT_EQ(b.T, 3);
  EXPECT_EQ(b.input_ids[0], 0);
  EXPECT_EQ(b.input_ids[3], 1);
  EXPECT_EQ(b.num_targets(), 1 + 2);
  r1.fill(0, b);  // examples 2, 3
  EXPECT_EQ(b.input_ids[0], 2);
  EXPECT_EQ(b.num_targets(), 3 + 4);
  r0.fill(1, b);  // example 6 alone
  EXPECT_EQ(b.B, 1);
  EXPECT_EQ(b.input_ids[0], 6);
  EXPECT_EQ(b.num_targets(), 7);
  r1.fill(1, b);  // nothing left: an empty batch, still a forward
  EXPECT_EQ(b.num_targets(), 0);
  // Every target is counted exactly once over all ranks and rounds.
  int64_t total = 0;
  for (const EvalBatches* e : {&r0, &r1, &r2}) {
    for (int64_t i = 0; i < e->rounds(); ++i) {
      e->fill(i, b);
      total += b.num_targets();
    }
  }
  EXPECT_EQ(total, 1 + 2 + 3 + 4 + 5 + 6 + 7);
  // max_batches caps the rounds.
  EXPECT_EQ(EvalBatches(data, 2, 0, 3, 1).rounds(), 1);
  EXPECT_EQ(EvalBatches(data, 1, 0, 1, 0).rounds(), 7);
}

}  // namespace
}  // namespace kiln
