// A run's life beyond its own code: workers die with their agent (kill -9 included), and an
// output directory belongs to one run at a time.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "common/background_kiln.h"
#include "common/run_kiln.h"
#include "common/tiny_run.h"
#include "kiln/base/file.h"

namespace kiln {
namespace {

using std::chrono::milliseconds;
using testing::alive;
using testing::BackgroundKiln;
using testing::run_kiln;
using testing::workers_under;
using Clock = std::chrono::steady_clock;

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// Waits until `agent` has `n` workers and rank 0 has written a metrics row; the workers.
std::vector<pid_t> wait_for_training(BackgroundKiln& agent, size_t n, const fs::path& metrics) {
  const auto deadline = Clock::now() + milliseconds(60000);
  std::vector<pid_t> workers;
  while (Clock::now() < deadline) {
    workers = workers_under(agent.pid());
    if (workers.size() >= n && fs::exists(metrics) && fs::file_size(metrics) > 0) return workers;
    std::this_thread::sleep_for(milliseconds(50));
  }
  ADD_FAILURE() << "training did not start: " << agent.log();
  return workers;
}

TEST(Lifecycle, WorkersDieWithTheirAgentAndTheOutputDirIsLockedMeanwhile) {
  const fs::path d = testing::setup_tiny_run("kiln_lifecycle", "orphans", {.max_steps = 100000});
  const std::string recipe = (d / "recipe.yaml").string();
  BackgroundKiln agent({"train", recipe}, d / "agent.log");
  const std::vector<pid_t> workers = wait_for_training(agent, 2, d / "run/metrics.jsonl");
  ASSERT_EQ(workers.size(), 2u);

  // A second run into the same output.dir fails at once, in one line naming the directory.
  auto second = run_kiln("train " + recipe + " train.max_steps=2");
  EXPECT_EQ(second.code, 1) << second.out;
  EXPECT_HAS(second.out, "kiln: error: output.dir " + (d / "run").string() +
                             " is in use by another kiln run (pid " + std::to_string(agent.pid()) +
                             ")");
  EXPECT_EQ(std::count(second.out.begin(), second.out.end(), '\n'), 1) << second.out;

  agent.signal(SIGKILL);
  const auto t0 = Clock::now();
  bool gone = false;
  while (!gone && Clock::now() - t0 < milliseconds(5000)) {
    gone = !alive(workers[0]) && !alive(workers[1]);
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(gone) << "workers " << workers[0] << ", " << workers[1]
                    << " outlived their agent by 5 s";
  std::fprintf(stderr, "workers gone %.3f s after kill -9 of the agent\n",
               std::chrono::duration<double>(Clock::now() - t0).count());

  // The lock died with the run: the next one into the directory trains.
  auto next = run_kiln("train " + recipe + " train.max_steps=2");
  EXPECT_EQ(next.code, 0) << next.out;
  fs::remove_all(d);
}

// SIGTERM (a Kubernetes preemption) mid-run: every rank finishes its step, one checkpoint is
// committed, kiln exits with kExitStopped (75) well inside failure.sigterm_grace_s, and
// train.resume=auto ends with the very weights of an uninterrupted run. The base model carries
// Qwen's real tokenizer (11 MB), which every checkpoint holds, so the stop checkpoint must copy it
// inside the grace period too.
void sigterm_then_resume(int nproc) {
  const std::string name = "sigterm" + std::to_string(nproc);
  const fs::path d =
      testing::setup_tiny_run("kiln_lifecycle", name, {.max_steps = 300, .real_tokenizer = true});
  const std::string recipe =
      (d / "recipe.yaml").string() + " dist.nproc_per_node=" + std::to_string(nproc);
  auto full = run_kiln("train " + recipe + " output.dir=" + (d / "full").string());
  ASSERT_EQ(full.code, 0) << full.out;

  std::vector<std::string> args = {"train", (d / "recipe.yaml").string(),
                                   "dist.nproc_per_node=" + std::to_string(nproc),
                                   "output.dir=" + (d / "stopped").string()};
  BackgroundKiln run(args, d / "stopped.log");
  wait_for_training(run, nproc > 1 ? static_cast<size_t>(nproc) : 0, d / "stopped/metrics.jsonl");
  const auto t0 = Clock::now();
  run.signal(SIGTERM);
  const int code = run.wait(milliseconds(30000));
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string log = run.log();
  ASSERT_EQ(code, 75) << log;
  EXPECT_LT(took, 10.0) << log;  // failure.sigterm_grace_s is 25
  std::fprintf(stderr, "%d worker(s): exit 75 %.2f s after SIGTERM\n", nproc, took);
  const size_t at = log.find("kiln: stopped on request after step ");
  ASSERT_NE(at, std::string::npos) << log;
  const int64_t step = std::stoll(log.substr(at + 36));
  EXPECT_GT(step, 0);
  EXPECT_LT(step, 300) << "the run ended before the signal arrived";
  const fs::path ckpt = d / "stopped/checkpoints" / fmt::format("step-{:08d}", step);
  EXPECT_TRUE(fs::exists(ckpt / "manifest.json")) << ckpt << "\n" << log;
  EXPECT_TRUE(read_file(ckpt / "tokenizer.json") == read_file(d / "init/tokenizer.json"))
      << "the checkpoint's tokenizer.json is not the base's, byte for byte";
  EXPECT_FALSE(fs::exists(d / "stopped/final"));

  auto resumed = run_kiln("train " + recipe + " output.dir=" + (d / "stopped").string() +
                          " train.resume=auto");
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_HAS(resumed.out, fmt::format("(step {})", step));
  EXPECT_TRUE(read_file(d / "full/final/model.safetensors") ==
              read_file(d / "stopped/final/model.safetensors"))
      << "final weights differ from the uninterrupted run";
  fs::remove_all(d);
}

TEST(Lifecycle, SigtermToTheAgentCheckpointsAndResumesExactly) { sigterm_then_resume(2); }
TEST(Lifecycle, SigtermToASingleProcessCheckpointsAndResumesExactly) { sigterm_then_resume(1); }

// One user action is one stop request, however many copies of the signal arrive: Ctrl-C in a
// terminal signals the whole process group (the agent, its workers, and, in a private network,
// the supervisor, which forwards its copy too); `timeout` and systemd signal the process, then
// its group. Either way the run commits its stop checkpoint and exits 75.
//
// Ctrl-C: the supervisor's forwarded copy may reach the agent after the agent began its graceful
// stop (the race the user lost): the supervisor is held (SIGSTOP) until the agent has noticed
// the group's copy, when the agent receives one at all, and then let go.
TEST(Lifecycle, CtrlCToTheProcessGroupStopsWithACheckpoint) {
  const fs::path d = testing::setup_tiny_run("kiln_lifecycle", "ctrlc", {.max_steps = 100000});
  BackgroundKiln run({"train", (d / "recipe.yaml").string()}, d / "run.log", {},
                     /*own_group=*/true);
  wait_for_training(run, 2, d / "run/metrics.jsonl");
  const std::vector<pid_t> agents = testing::children_of(run.pid());
  const bool supervised = run.log().find("no private network") == std::string::npos;
  if (supervised) {
    ASSERT_EQ(agents.size(), 1u) << run.log();
    ::kill(run.pid(), SIGSTOP);
  }
  run.signal_group(SIGINT);
  if (supervised) {
    if (::getpgid(agents[0]) == ::getpgid(run.pid())) {  // the agent got a copy of its own
      const auto deadline = Clock::now() + milliseconds(60000);
      while (run.log().find("agent: received signal 2") == std::string::npos &&
             Clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(20));
      }
    }
    ::kill(run.pid(), SIGCONT);
  }
  const int code = run.wait(milliseconds(60000));
  const std::string log = run.log();
  ASSERT_EQ(code, 75) << log;
  const size_t at = log.find("kiln: stopped on request after step ");
  ASSERT_NE(at, std::string::npos) << log;
  const int64_t step = std::stoll(log.substr(at + 36));
  EXPECT_TRUE(
      fs::exists(d / "run/checkpoints" / fmt::format("step-{:08d}", step) / "manifest.json"))
      << log;
  EXPECT_EQ(log.find("killing the workers now"), std::string::npos) << log;
  fs::remove_all(d);
}

// `timeout` (and systemd) signal the process, then its group, at once: copies within 2 s are one
// request.
TEST(Lifecycle, TimeoutsSignalThenGroupSignalStopsWithACheckpoint) {
  const fs::path d = testing::setup_tiny_run("kiln_lifecycle", "timeout", {.max_steps = 100000});
  BackgroundKiln run({"train", (d / "recipe.yaml").string()}, d / "run.log", {},
                     /*own_group=*/true);
  wait_for_training(run, 2, d / "run/metrics.jsonl");
  run.signal(SIGTERM);
  run.signal_group(SIGTERM);
  const int code = run.wait(milliseconds(60000));
  const std::string log = run.log();
  ASSERT_EQ(code, 75) << log;
  EXPECT_HAS(log, "kiln: stopped on request after step ");
  EXPECT_EQ(log.find("killing the workers now"), std::string::npos) << log;
  fs::remove_all(d);
}

// A preemption that arrives while a run that has finished training evaluates for the last time:
// the run completes (final/ written) and exits 0, not 143. Rank 0 sends the agent SIGTERM as
// the final evaluation begins (KILN_FAULT ...:term@eval).
TEST(Lifecycle, SigtermDuringTheFinalEvaluationOfACompletedRunExitsZero) {
  const fs::path d = testing::setup_tiny_run("kiln_lifecycle", "evalterm", {.max_steps = 4});
  const std::string demo = std::string(KILN_SOURCE_DIR) + "/assets/demo/tokens.jsonl";
  auto r = run_kiln(
      "train " + (d / "recipe.yaml").string() + " data.eval=" + demo + " eval.max_batches=4",
      "KILN_FAULT=0:4:term@eval");
  EXPECT_HAS(r.out, "injecting 'term' at step 4 (eval)");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(d / "run/final/model.safetensors")) << r.out;
  EXPECT_EQ(r.out.find("kiln: error:"), std::string::npos) << r.out;
  fs::remove_all(d);
}

// Issue 34: SIGTERM, then a worker's own error (here its stop checkpoint cannot be written:
// output.dir/checkpoints is a file) ended with 143 and a last line blaming the grace period. The
// worker's error is the group's failure: exit 1, the last line naming the rank and its error.
TEST(Lifecycle, AWorkersErrorDuringAStopIsTheFailureNotTheGracePeriod) {
  const fs::path d = testing::setup_tiny_run("kiln_lifecycle", "stoperr", {.max_steps = 1000});
  fs::create_directories(d / "run");
  write_file_atomic(d / "run/checkpoints", "a file where the checkpoints would go\n");
  const auto t0 = Clock::now();
  auto r = run_kiln("train " + (d / "recipe.yaml").string(), "KILN_FAULT=0:2:term");
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_HAS(r.out, "injecting 'term' at step 2");
  EXPECT_EQ(r.code, 1) << r.out;
  std::string out = r.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const std::string last = out.substr(out.rfind('\n') + 1);
  EXPECT_TRUE(last.starts_with("kiln: error: worker group failed: rank ")) << r.out;
  EXPECT_HAS(last, "failed with exit code 1: ");
  EXPECT_HAS(last, "checkpoints");
  EXPECT_EQ(last.find("sigterm_grace_s"), std::string::npos) << r.out;
  EXPECT_LT(took, 20.0) << "waited for the grace period (25 s) instead of failing";
  fs::remove_all(d);
}

// The agent a private network's supervisor watches stops (SIGSTOP; a cgroup freezer does the
// same): its workers lose the store and exit, and the supervisor, hearing no heartbeat for the
// watchdog's 5 s, kills it and fails in one line naming it, instead of waiting forever.
TEST(Lifecycle, AFrozenAgentFailsItsNodeInsteadOfHanging) {
  const fs::path d = testing::setup_tiny_run("kiln_lifecycle", "frozen", {.max_steps = 100000});
  BackgroundKiln run({"train", (d / "recipe.yaml").string()}, d / "run.log");
  const std::vector<pid_t> workers = wait_for_training(run, 2, d / "run/metrics.jsonl");
  if (run.log().find("no private network") != std::string::npos) {
    GTEST_SKIP() << "no private network here (the agent is the launcher itself): " << run.log();
  }
  const std::vector<pid_t> agents = testing::children_of(run.pid());
  ASSERT_EQ(agents.size(), 1u) << run.log();
  const auto t0 = Clock::now();
  ::kill(agents[0], SIGSTOP);
  const int code = run.wait(milliseconds(90000));
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string log = run.log();
  ASSERT_EQ(code, 1) << log;
  std::fprintf(stderr, "supervisor failed %.1f s after SIGSTOP of its agent\n", took);
  const size_t at = log.rfind("kiln: error: ");
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_HAS(log.substr(at), "kiln: error: the node agent (pid " + std::to_string(agents[0]) +
                                 ") sent no heartbeat for ");
  const auto gone_by = Clock::now() + milliseconds(10000);
  for (pid_t w : workers) {
    while (alive(w) && Clock::now() < gone_by) std::this_thread::sleep_for(milliseconds(20));
    EXPECT_FALSE(alive(w)) << "worker " << w << " outlived its agent";
  }
  fs::remove_all(d);
}

}  // namespace
}  // namespace kiln
