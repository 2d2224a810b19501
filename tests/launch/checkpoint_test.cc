// Checkpoints end to end: exact resume, restarts after killed workers, resharding to another
// world size, export from a sharded checkpoint, and torn checkpoints ignored.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/run_kiln.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/io/checkpoint_reader.h"

namespace kiln {
namespace {

using testing::run_kiln;

fs::path make_run(const std::string& name, const std::string& extra = "") {
  const fs::path d = fs::temp_directory_path() / ("kiln_ckpt_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  auto r = run_kiln("init --config tiny --seed 2 --out " + (d / "init").string());
  EXPECT_EQ(r.code, 0) << r.out;
  write_file_atomic(d / "recipe.yaml",
                    "model:\n  path: " + (d / "init").string() +
                        "\ndata:\n  train: " + KILN_SOURCE_DIR +
                        "/assets/demo/tokens.jsonl\n  seq_len: 64\n"
                        "optimizer:\n  lr: 3.0e-3\nschedule:\n  name: cosine\n  warmup_steps: 4\n"
                        "train:\n  max_steps: 20\n  micro_batch_size: 4\n  log_every: 20\n"
                        "checkpoint:\n  every_steps: 5\n  keep_last: 0\n"
                        "dist:\n  timeout_s: 30\n  threads_per_worker: 1\n" +
                        extra);
  return d;
}

std::vector<double> losses(const fs::path& run) {
  std::vector<double> out;
  std::ifstream f(run / "metrics.jsonl");
  std::string line;
  while (std::getline(f, line)) out.push_back(parse_json(line, "metrics").at("loss").get<double>());
  return out;
}

// Max |a - b| over every tensor of two HF directories.
double max_weight_diff(const fs::path& a, const fs::path& b) {
  CheckpointReader ra(a), rb(b);
  EXPECT_EQ(ra.names(), rb.names());
  double m = 0;
  for (const auto& name : ra.names()) {
    std::vector<float> x(ra.info(name).numel()), y(x.size());
    ra.read_f32(name, ra.info(name).shape, x.data());
    rb.read_f32(name, ra.info(name).shape, y.data());
    for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(double{x[i]} - y[i]));
  }
  return m;
}

TEST(Checkpoint, ResumeIsBitIdenticalToAnUninterruptedRun) {
  const fs::path d = make_run("resume");
  const std::string recipe = (d / "recipe.yaml").string();
  auto full =
      run_kiln("train " + recipe + " output.dir=" + (d / "full").string(), "OMP_NUM_THREADS=1");
  ASSERT_EQ(full.code, 0) << full.out;
  // Dies at the start of step 13; the newest checkpoint is step 10.
  auto crash = run_kiln("train " + recipe + " output.dir=" + (d / "cut").string(),
                        "OMP_NUM_THREADS=1 KILN_FAULT=0:13:exit");
  ASSERT_NE(crash.code, 0);
  EXPECT_TRUE(fs::exists(d / "cut/checkpoints/step-00000010/manifest.json"));
  auto resumed =
      run_kiln("train " + recipe + " output.dir=" + (d / "cut").string() + " train.resume=auto",
               "OMP_NUM_THREADS=1");
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("resumed from"), std::string::npos) << resumed.out;
  const auto a = losses(d / "full"), b = losses(d / "cut");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
  EXPECT_EQ(max_weight_diff(d / "full/final", d / "cut/final"), 0.0);
}

TEST(Checkpoint, KilledWorkersRestartAndFinishLikeAnUninterruptedRun) {
  const fs::path d = make_run("restart", "failure:\n  max_restarts: 2\n");
  const std::string recipe = (d / "recipe.yaml").string();
  auto full = run_kiln("train " + recipe +
                       " dist.nproc_per_node=2 train.micro_batch_size=2 "
                       "output.dir=" +
                       (d / "full").string());
  ASSERT_EQ(full.code, 0) << full.out;
  // Rank 1 is SIGKILLed at the start of step 8 in the first attempt; the group restarts from
  // the step-5 checkpoint.
  auto r = run_kiln("train " + recipe +
                        " dist.nproc_per_node=2 train.micro_batch_size=2 "
                        "output.dir=" +
                        (d / "killed").string(),
                    "KILN_FAULT=1:8:kill:0");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("restarting the group from the newest checkpoint"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
  EXPECT_EQ(max_weight_diff(d / "full/final", d / "killed/final"), 0.0);
  for (const auto& e : fs::directory_iterator(d / "killed/checkpoints")) {
    EXPECT_FALSE(e.path().string().ends_with(".tmp")) << e.path();
  }
  // Failing in every attempt spends the budget; the history names each failure.
  auto spent = run_kiln("train " + recipe +
                            " dist.nproc_per_node=2 train.micro_batch_size=2 "
                            "failure.max_restarts=1 output.dir=" +
                            (d / "spent").string(),
                        "KILN_FAULT=0:3:exit:*");
  EXPECT_NE(spent.code, 0);
  EXPECT_NE(spent.out.find("worker group failed after 1 restart(s): attempt 1: rank 0"),
            std::string::npos)
      << spent.out;
  EXPECT_NE(spent.out.find("attempt 2: rank 0"), std::string::npos) << spent.out;
}

TEST(Checkpoint, ResumeAtAnotherWorldSizeContinuesTheSameRun) {
  const fs::path d = make_run("reshard");
  const std::string recipe = (d / "recipe.yaml").string();
  auto four = run_kiln("train " + recipe +
                       " dist.nproc_per_node=4 train.micro_batch_size=1 "
                       "output.dir=" +
                       (d / "four").string());
  ASSERT_EQ(four.code, 0) << four.out;
  auto two = run_kiln("train " + recipe +
                      " dist.nproc_per_node=2 train.micro_batch_size=2 "
                      "train.resume=" +
                      (d / "four/checkpoints/step-00000010").string() +
                      " output.dir=" + (d / "two").string());
  ASSERT_EQ(two.code, 0) << two.out;
  const auto a = losses(d / "four"), b = losses(d / "two");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 10u);  // steps 11..20
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_NEAR(b[i], a[10 + i], 1e-5 * std::fabs(a[10 + i])) << "step " << 11 + i;
  }
  EXPECT_LT(max_weight_diff(d / "four/final", d / "two/final"), 1e-4);
  // The same checkpoint on one process (no_shard) as well.
  auto one = run_kiln("train " + recipe +
                      " train.resume=" + (d / "four/checkpoints/step-00000015").string() +
                      " output.dir=" + (d / "one").string());
  ASSERT_EQ(one.code, 0) << one.out;
  const auto c = losses(d / "one");
  ASSERT_EQ(c.size(), 5u);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(c[i], a[15 + i], 1e-5 * std::fabs(a[15 + i]));
}

TEST(Checkpoint, ExportStreamsFromShardsAndTornCheckpointsAreIgnored) {
  const fs::path d = make_run("export");
  const std::string recipe = (d / "recipe.yaml").string();
  auto r = run_kiln("train " + recipe +
                    " dist.nproc_per_node=2 train.micro_batch_size=2 "
                    "checkpoint.keep_last=2 output.dir=" +
                    (d / "run").string());
  ASSERT_EQ(r.code, 0) << r.out;
  // keep_last=2: steps 15 and 20 remain
  EXPECT_FALSE(fs::exists(d / "run/checkpoints/step-00000010"));
  EXPECT_TRUE(fs::exists(d / "run/checkpoints/step-00000015/manifest.json"));
  EXPECT_TRUE(fs::exists(d / "run/checkpoints/step-00000020/rank-00001-of-00002.safetensors"));
  auto e = run_kiln("export --checkpoint " + (d / "run/checkpoints/step-00000020").string() +
                    " --out " + (d / "exported").string());
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_EQ(max_weight_diff(d / "run/final", d / "exported"), 0.0);
  // A half-written checkpoint (no final name) is never resumed from.
  fs::create_directories(d / "run/checkpoints/step-00000030.tmp");
  write_file_atomic(d / "run/checkpoints/step-00000030.tmp/rank-00000-of-00002.safetensors", "x");
  auto again = run_kiln("train " + recipe +
                        " dist.nproc_per_node=2 train.micro_batch_size=2 "
                        "train.max_steps=22 train.resume=auto output.dir=" +
                        (d / "run").string());
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find("step-00000020 (step 20)"), std::string::npos) << again.out;
  EXPECT_FALSE(fs::exists(d / "run/checkpoints/step-00000030.tmp"));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A full disk during a save: a clear error naming the checkpoint, and the previous checkpoint
// intact and loadable. Needs root to mount a small tmpfs; skipped with the reason otherwise.
TEST(Checkpoint, FullDiskKeepsThePreviousCheckpoint) {
  const fs::path d = make_run("fulldisk");
  const fs::path mnt = d / "small";
  fs::create_directories(mnt);
  const std::string mount = "mount -t tmpfs -o size=3m tmpfs " + mnt.string() + " 2>&1";
  if (std::system(mount.c_str()) != 0) {
    GTEST_SKIP() << "cannot mount a 3 MiB tmpfs here (needs root): full-disk test not run";
  }
  // Each checkpoint of the tiny model is ~2.6 MB (params + AdamW m and v): step 5 fits, step 10
  // does not.
  auto r =
      run_kiln("train " + (d / "recipe.yaml").string() + " output.dir=" + (mnt / "run").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("kiln: error: checkpoint step 10 failed on rank 0"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(mnt / "run/checkpoints/step-00000010"));
  EXPECT_FALSE(fs::exists(mnt / "run/checkpoints/step-00000010.tmp"));
  auto e = run_kiln("export --checkpoint " + (mnt / "run/checkpoints/step-00000005").string() +
                    " --out " + (d / "exported").string());
  EXPECT_EQ(e.code, 0) << e.out;
  std::system(("umount " + mnt.string()).c_str());
}

}  // namespace
}  // namespace kiln
