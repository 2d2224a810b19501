// The local launcher: rank-prefixed output, and a failing or hung worker tears the whole group
// down with a clear error naming the rank, never a hang.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>
#include <vector>

#include "common/loopback.h"
#include "common/run_kiln.h"
#include "common/temp_dir.h"
#include "common/tiny_run.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"

namespace kiln {
namespace {

using testing::run_kiln;

fs::path setup_run(const std::string& name) {
  return testing::setup_tiny_run("kiln_launcher", name, {});
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

// The last line of `out`.
std::string last_line(const std::string& out) {
  const size_t end = out.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t begin = out.rfind('\n', end);
  return out.substr(begin == std::string::npos ? 0 : begin + 1, end + 1 - (begin + 1));
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

// The failure line names the step the failed rank began, even when it died a moment later (the
// watchdog publishes steps to the store only twice a second; the agent reads the worker's slot).
TEST(Launcher, TheFailureLineNamesTheStepTheRankDiedIn) {
  const fs::path d = setup_run("step");
  auto r = run_kiln("train " + (d / "recipe.yaml").string() + " train.max_steps=40",
                    "KILN_FAULT=1:23:kill");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("kiln: error: worker group failed: rank 1 (pid "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(") failed with signal 9 (Killed), last step 23\n"), std::string::npos)
      << r.out;
}

// Every rank fails with the same error: it is printed once, naming the ranks that reported it
// (both, unless the agent's teardown of the group stopped rank 1 before it got there: a loaded
// machine), and the agent's last line (what `kubectl logs | tail -1` shows) ends with it.
TEST(Launcher, AWorkersErrorIsPrintedOnceAndEndsTheLastLine) {
  const fs::path d = setup_run("oneline");
  auto r = run_kiln("train " + (d / "recipe.yaml").string() + " train.max_steps=2");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_kiln("train " + (d / "recipe.yaml").string() + " train.resume=auto train.seed=9");
  EXPECT_EQ(r.code, 1) << r.out;
  const std::string msg = "train.resume=auto: " + (d / "run/checkpoints/step-00000002").string() +
                          " was written by another run: train.seed was 0, is 9";
  size_t first = r.out.find("[ranks 0, 1] kiln: error: " + msg);
  if (first == std::string::npos) first = r.out.find("] kiln: error: " + msg);
  ASSERT_NE(first, std::string::npos) << r.out;
  EXPECT_EQ(r.out.rfind("[rank", first), r.out.rfind('\n', first) + 1) << r.out;
  EXPECT_EQ(r.out.find("kiln: error: " + msg, first + 1), r.out.rfind("kiln: error: " + msg))
      << "printed more than once besides the last line:\n"
      << r.out;
  const std::string last = last_line(r.out);
  EXPECT_EQ(last.rfind("kiln: error: worker group failed: rank ", 0), 0u) << r.out;
  EXPECT_NE(last.find("failed with exit code 1: " + msg), std::string::npos) << r.out;
}

// What needs no worker (a data file, the model directory) is checked before any starts: one line.
TEST(Launcher, InputsAreCheckedBeforeAnyWorkerStarts) {
  const fs::path d = setup_run("preflight");
  auto r = run_kiln("train " + (d / "recipe.yaml").string() +
                    " data.train=" + (d / "missing.jsonl").string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_EQ(r.out.rfind("kiln: error: data.train: " + (d / "missing.jsonl").string() +
                            " does not exist (a relative path in a recipe file is relative to",
                        0),
            0u)
      << r.out;
  write_file_atomic(d / "chat.jsonl",
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  r = run_kiln("train " + (d / "recipe.yaml").string() +
               " data.train=" + (d / "chat.jsonl").string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find("kiln: error: " + (d / "chat.jsonl").string() + ":1: "), std::string::npos)
      << r.out;
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

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// One rank sleeps inside step 3, outside any collective: rank 0's collective waits; at
// dist.timeout_s every rank writes a report and the launcher names the stuck rank in one line.
TEST(Launcher, HangReportsNameTheStuckRankInOneLine) {
  const fs::path d = setup_run("hangreport");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_kiln("train " + (d / "recipe.yaml").string() + " dist.timeout_s=3",
                    "KILN_FAULT=1:3:hang");
  const double took = seconds_since(t0);
  EXPECT_NE(r.code, 0);
  EXPECT_LT(took, 3 + 8);  // startup and two steps, the timeout, a few seconds of reporting
  const fs::path hang = d / "run/hang";
  size_t at = r.out.find("\nkiln: error: hang: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
  EXPECT_HAS(line, "rank 1 stopped");
  EXPECT_HAS(line, "outside any collective (last: ");
  EXPECT_HAS(line, "rank 0 waited ");
  EXPECT_HAS(line, "reports: " + hang.string() + "/rank-*.txt");
  EXPECT_EQ(line.find("rank 0 stopped"), std::string::npos) << line;
  // The trainer tells the watchdog its step (WorkerContext::begin_step).
  EXPECT_HAS(line, "rank 1 stopped at step 3 ");
  // Both ranks wrote a report: rank 0 waits in a collective missing rank 1; rank 1 is idle.
  ASSERT_TRUE(fs::exists(hang / "rank-00000.txt")) << r.out;
  ASSERT_TRUE(fs::exists(hang / "rank-00001.txt")) << r.out;
  const std::string r0 = read_file(hang / "rank-00000.txt"),
                    r1 = read_file(hang / "rank-00001.txt");
  EXPECT_HAS(r0, "kiln hang report: rank 0 of 2");
  EXPECT_HAS(r0, "now: waiting in ");
  EXPECT_HAS(r0, "; missing: rank 1\n");
  EXPECT_HAS(r0, "last operations (oldest first):\n  world-0 ");
  EXPECT_HAS(r1, "kiln hang report: rank 1 of 2");
  EXPECT_HAS(r1, "now: not in a collective since ");
  // Every rank, not only rank 0 (which writes metrics), tells its watchdog each step's end
  // (WorkerContext::end_step).
  EXPECT_HAS(r0, "\nstep: 3\nlast completed step: 2\n");
  EXPECT_HAS(r1, "\nstep: 3\nlast completed step: 2\n");
  EXPECT_HAS(r1, "trigger: rank 0 waited ");
  // The ops rank 1 finished are the ones rank 0 finished before its wait.
  EXPECT_HAS(r1, " done ");
  // Reports were written before the group failed, not after a long wait.
  EXPECT_HAS(r.out, "[rank 1] kiln: hang report: rank 1 not in a collective since ");
}

// A free TCP port on this host (for node 0's store).
int free_port() { return testing::free_loopback_port(); }

// Two agents as two nodes of one job on 127.0.0.1 (one worker each); returns each node's result.
std::vector<testing::CmdResult> run_two_nodes(const std::string& args, const std::string& env) {
  const int port = free_port();
  std::vector<testing::CmdResult> res(2);
  std::vector<std::thread> agents;
  for (int n = 0; n < 2; ++n) {
    agents.emplace_back([&, n] {
      res[n] = run_kiln(args + " --nnodes 2 --node-rank " + std::to_string(n) +
                            " --nproc-per-node 1 --master-addr 127.0.0.1 --master-port " +
                            std::to_string(port),
                        "KILN_STORE_TOKEN=launcher-test-" + std::to_string(::getpid()) + " " + env);
    });
  }
  for (auto& a : agents) a.join();
  return res;
}

// Two agents as two nodes on 127.0.0.1, each with its own extra arguments.
std::vector<testing::CmdResult> run_two_nodes_each(const std::string& args,
                                                   const std::vector<std::string>& per_node) {
  const int port = free_port();
  std::vector<testing::CmdResult> res(2);
  std::vector<std::thread> agents;
  for (int n = 0; n < 2; ++n) {
    agents.emplace_back([&, n] {
      res[n] = run_kiln(args + " " + per_node[n] + " --nnodes 2 --node-rank " + std::to_string(n) +
                            " --master-addr 127.0.0.1 --master-port " + std::to_string(port),
                        "KILN_STORE_TOKEN=launcher-test-" + std::to_string(::getpid()));
    });
  }
  for (auto& a : agents) a.join();
  return res;
}

// Nodes started with different recipes (another learning rate: both would train, with a loss
// that diverges) or another number of workers (a store key never set) fail at once, every node
// with the same line naming the setting, the node and both values; no worker starts.
TEST(MultiNode, NodesThatDisagreeRefuseToStartNamingTheDifference) {
  const fs::path d = setup_run("disagree");
  const std::string train = "train " + (d / "recipe.yaml").string() +
                            " output.dir=" + (d / "run").string() + " --nproc-per-node 1";
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_two_nodes_each(train, {"optimizer.lr=1e-3", "optimizer.lr=2e-3"});
  for (int n = 0; n < 2; ++n) {
    EXPECT_EQ(r[n].code, 1) << r[n].out;
    EXPECT_EQ(last_line(r[n].out),
              "kiln: error: the nodes disagree on optimizer.lr: node 0 has 0.001, node 1 has "
              "0.002 (every node must train the same recipe)")
        << r[n].out;
    EXPECT_EQ(r[n].out.find("[rank "), std::string::npos) << r[n].out;
  }
  r = run_two_nodes_each(
      "train " + (d / "recipe.yaml").string() + " output.dir=" + (d / "run").string(),
      {"--nproc-per-node 1", "--nproc-per-node 2"});
  for (int n = 0; n < 2; ++n) {
    EXPECT_EQ(r[n].code, 1) << r[n].out;
    EXPECT_EQ(last_line(r[n].out),
              "kiln: error: the nodes disagree on the workers per node (--nproc-per-node, "
              "dist.nproc_per_node): node 0 has 1, node 1 has 2")
        << r[n].out;
  }
  EXPECT_LT(seconds_since(t0), 60);  // not a store timeout (dist.timeout_s 5 is never waited)
  EXPECT_FALSE(fs::exists(d / "run/final"));
}

TEST(MultiNode, AgentsAgreeOnRestartsAndFinishLikeAnUninterruptedRun) {
  const fs::path d = setup_run("nodes");
  const std::string recipe = (d / "recipe.yaml").string() +
                             " checkpoint.every_steps=2 dist.timeout_s=20 failure.max_restarts=1";
  auto full = run_kiln("train " + recipe + " output.dir=" + (d / "full").string());
  ASSERT_EQ(full.code, 0) << full.out;
  // Rank 1 (node 1's worker) is SIGKILLed at the start of step 5 in the first attempt: both
  // agents stop, agree on attempt 2 and resume from the newest complete checkpoint.
  auto r = run_two_nodes("train " + recipe + " output.dir=" + (d / "killed").string(),
                         "KILN_FAULT=1:5:kill:0");
  for (int n = 0; n < 2; ++n) {
    ASSERT_EQ(r[n].code, 0) << "node " << n << ":\n" << r[n].out;
    EXPECT_HAS(r[n].out,
               "restarting the group from the newest checkpoint (1 of 1): attempt 1: "
               "rank 1 (pid ");
    EXPECT_HAS(r[n].out, ", node 1) failed with signal 9");
  }
  EXPECT_HAS(r[0].out, "resumed from");
  EXPECT_EQ(read_file(d / "full/final/model.safetensors"),
            read_file(d / "killed/final/model.safetensors"));
  for (const auto& e : fs::directory_iterator(d / "killed/checkpoints")) {
    EXPECT_FALSE(e.path().string().ends_with(".tmp")) << e.path();
  }
  // Failing in every attempt spends node 0's budget: both agents exit non-zero with the history.
  auto spent = run_two_nodes("train " + recipe + " output.dir=" + (d / "spent").string(),
                             "KILN_FAULT=1:2:kill:*");
  for (int n = 0; n < 2; ++n) {
    EXPECT_NE(spent[n].code, 0) << spent[n].out;
    EXPECT_HAS(spent[n].out,
               "kiln: error: worker group failed after 1 restart(s): attempt 1: "
               "rank 1 (pid ");
    EXPECT_HAS(spent[n].out, "; attempt 2: rank 1 (pid ");
  }
  EXPECT_FALSE(fs::exists(d / "spent/final"));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(RuntimeApi, UserTrainingFunctionRunsOnEveryWorker) {
  const testing::CmdResult r = testing::run_shell(std::string(KILN_BINARY_DIR) +
                                                  "/bin/kiln_custom_train_example --nproc 3 2>&1");
  EXPECT_EQ(r.code, 0) << r.out;
  const std::string& out = r.out;
  EXPECT_NE(out.find("[rank 0] report: {\"sum\":6.0,\"world_size\":3}"), std::string::npos) << out;
}

testing::CmdResult run_example(const std::string& args, const std::string& env = "") {
  return testing::run_shell(env + " " + std::string(KILN_BINARY_DIR) +
                            "/bin/kiln_custom_train_example " + args + " 2>&1");
}

// report(metrics, dir) commits every rank's part atomically; a killed worker's group restarts
// and the function resumes from latest_checkpoint() to the uninterrupted result.
TEST(RuntimeApi, ReportedCheckpointsResumeAKilledFunction) {
  const fs::path d = testing::fresh_path("kiln_runtime");
  auto full = run_example("--nproc 2 --steps 8 --out " + (d / "full").string());
  ASSERT_EQ(full.code, 0) << full.out;
  EXPECT_EQ(full.out.find("resumed from"), std::string::npos) << full.out;
  auto r = run_example("--nproc 2 --steps 8 --max-restarts 1 --out " + (d / "killed").string(),
                       "KILN_FAULT=1:5:kill");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("restarting the group"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 0] resumed from " +
                       (d / "killed/checkpoints/step-00000004").string() + " (step 4)"),
            std::string::npos)
      << r.out;
  const std::string result = read_file(d / "full/result.txt");
  EXPECT_GT(result.size(), 8u);
  EXPECT_EQ(result, read_file(d / "killed/result.txt"));
  // keep_last 2: the two newest, each complete (manifest and both ranks' parts); nothing torn.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(d / "killed/checkpoints")) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-00000007", "step-00000008"}));
  for (const auto& n : names) {
    const fs::path c = d / "killed/checkpoints" / n;
    EXPECT_EQ(parse_json(read_file(c / "manifest.json"), "manifest").at("world_size"), 2);
    EXPECT_TRUE(fs::exists(c / "rank-00000/state.bin"));
    EXPECT_TRUE(fs::exists(c / "rank-00001/state.bin"));
  }
  // metrics.jsonl: one row per step, the steps after the resumed checkpoint not doubled.
  std::istringstream in(read_file(d / "killed/metrics.jsonl")),
      ref(read_file(d / "full/metrics.jsonl"));
  int64_t expect = 1;
  for (std::string line, ref_line; std::getline(in, line); ++expect) {
    const Json j = parse_json(line, "metrics");
    EXPECT_EQ(j.at("step").get<int64_t>(), expect) << line;
    ASSERT_TRUE(std::getline(ref, ref_line));
    EXPECT_EQ(j.at("loss"), parse_json(ref_line, "metrics").at("loss")) << line;
  }
  EXPECT_EQ(expect, 9);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A user's function that calls begin_step(): the hang line names the step the rank stopped in.
TEST(RuntimeApi, HangInsideAStepNamesTheStep) {
  const fs::path d = testing::fresh_path("kiln_runtime_hang");
  const auto t0 = std::chrono::steady_clock::now();
  auto r =
      run_example("--nproc 2 --steps 8 --timeout-s 2 --out " + d.string(), "KILN_FAULT=1:3:hang");
  EXPECT_NE(r.code, 0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2 + 10);
  EXPECT_NE(
      r.out.find("\nkiln: error: hang: rank 1 stopped at step 3 outside any collective (last: "),
      std::string::npos)
      << r.out;
  EXPECT_NE(read_file(d / "hang/rank-00001.txt").find("\nstep: 3\n"), std::string::npos);
  EXPECT_NE(read_file(d / "hang/rank-00000.txt").find("\nstep: 3\n"), std::string::npos);
}

}  // namespace
}  // namespace kiln
