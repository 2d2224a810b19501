// The local launcher: rank-prefixed output, and a failing or hung worker tears the whole group
// down with a clear error naming the rank, never a hang.
#include <gtest/gtest.h>

#include <chrono>

#include "common/run_kiln.h"
#include "kiln/base/file.h"

namespace kiln {
namespace {

using testing::run_kiln;

fs::path setup_run(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("kiln_launcher_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  auto r = run_kiln("init --config tiny --seed 1 --out " + (d / "init").string());
  EXPECT_EQ(r.code, 0) << r.out;
  write_file_atomic(d / "recipe.yaml",
                    "model:\n  path: " + (d / "init").string() +
                        "\ndata:\n  train: " + KILN_SOURCE_DIR +
                        "/assets/demo/tokens.jsonl\n  seq_len: 64\n"
                        "train:\n  max_steps: 6\n  micro_batch_size: 2\n"
                        "dist:\n  nproc_per_node: 2\n  timeout_s: 5\n  threads_per_worker: 1\n"
                        "output:\n  dir: " +
                        (d / "run").string() + "\n");
  return d;
}

TEST(Launcher, TwoWorkersPrefixOutputAndTrain) {
  const fs::path d = setup_run("ok");
  auto r = run_kiln("train " + (d / "recipe.yaml").string(), "KILN_LOG_LEVEL=debug");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank 0] step 6/6 | loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 1] "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("joined: gloo-tcp lo 127.0.0.1"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(d / "run/final/model.safetensors"));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Launcher, WorkerExitTearsDownGroup) {
  const fs::path d = setup_run("exit");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_kiln("train " + (d / "recipe.yaml").string(), "KILN_FAULT=1:3:exit");
  EXPECT_NE(r.code, 0);
  EXPECT_LT(seconds_since(t0), 30);
  EXPECT_NE(r.out.find("kiln: error: worker group failed: rank 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("exit code 3"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(d / "run/final"));
}

TEST(Launcher, KilledWorkerIsNamed) {
  const fs::path d = setup_run("abort");
  auto r = run_kiln("train " + (d / "recipe.yaml").string(), "KILN_FAULT=0:2:abort");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("worker group failed: rank 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("signal 6"), std::string::npos) << r.out;
}

TEST(Launcher, HungPeerFailsWithinTimeoutNamingIt) {
  const fs::path d = setup_run("hang");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_kiln("train " + (d / "recipe.yaml").string(), "KILN_FAULT=1:3:hang");
  EXPECT_NE(r.code, 0);
  EXPECT_LT(seconds_since(t0), 40);  // dist.timeout_s is 5
  // rank 0's collective times out and names the rank that did not arrive
  EXPECT_NE(r.out.find("[rank 0] kiln: error:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1 did not arrive"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(RuntimeApi, UserTrainingFunctionRunsOnEveryWorker) {
  const std::string cmd =
      std::string(KILN_BINARY_DIR) + "/bin/kiln_custom_train_example --nproc 3 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << out;
  EXPECT_NE(out.find("[rank 0] report: {\"sum\":6.0,\"world_size\":3}"), std::string::npos) << out;
}

}  // namespace
}  // namespace kiln
