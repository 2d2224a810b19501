// A run's life beyond its own code: workers die with their agent (kill -9 included), and an
// output directory belongs to one run at a time.
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
using testing::children_of;
using testing::run_kiln;
using Clock = std::chrono::steady_clock;

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// Waits until `agent` has `n` worker children and rank 0 has written a metrics row; the workers.
std::vector<pid_t> wait_for_training(BackgroundKiln& agent, size_t n, const fs::path& metrics) {
  const auto deadline = Clock::now() + milliseconds(60000);
  std::vector<pid_t> workers;
  while (Clock::now() < deadline) {
    workers = children_of(agent.pid());
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

}  // namespace
}  // namespace kiln
