// The hang watchdog: reports of a rank waiting in a collective and of a rank stuck outside any,
// and the agent's one-line summary, over a MemoryStore with every rank a thread.
#include "kiln/comm/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/temp_dir.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/tcp_store.h"

namespace kiln {
namespace {

using std::chrono::milliseconds;

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

fs::path temp_dir(const std::string& name) { return testing::fresh_path("kiln_watchdog", name); }

TEST(HangWatchdog, WaitLongerThanTheTimeoutWritesAReport) {
  auto store = std::make_shared<MemoryStore>();
  const fs::path dir = temp_dir("wait");
  WatchdogOptions o;
  o.ns = "kiln/g";
  o.rank = 0;
  o.world_size = 2;
  o.timeout = milliseconds(50);
  o.report_dir = dir;
  o.start_thread = false;
  HangWatchdog wd(store, o);
  const int g = wd.add_group("g", 0, {0, 1}, std::make_shared<PrefixStore>("g", store));
  store->set("g/progress/1", to_bytes("1"));  // rank 1 entered #1, never #2
  wd.set_step(4);
  wd.set_step(3, /*began=*/false);
  wd.op_queued(g, 1, "all_gather");
  wd.op_started(g, 1);
  wd.op_finished(g, 1, true);
  wd.op_queued(g, 2, "all_reduce");
  wd.op_started(g, 2);
  EXPECT_FALSE(wd.check());  // not yet past the timeout
  EXPECT_FALSE(fs::exists(dir / "rank-00000.txt"));
  std::this_thread::sleep_for(milliseconds(80));
  EXPECT_TRUE(wd.check());
  const std::string text = read_file(dir / "rank-00000.txt");
  EXPECT_HAS(text, "kiln hang report: rank 0 of 2 (node 0, pid ");
  EXPECT_HAS(text, "\nstep: 4\nlast completed step: 3\n");
  EXPECT_HAS(text, "\nnow: waiting in all_reduce #2 (group g) for ");
  EXPECT_HAS(text, "; missing: rank 1\n");
  EXPECT_HAS(text, "  g all_gather #1: queued ");
  EXPECT_HAS(text, "  g all_reduce #2: queued ");
  EXPECT_HAS(to_string(store->get("kiln/g/hang", milliseconds(10))), "rank 0 waited ");
  EXPECT_EQ(published_step(*store, "kiln/g", 0), 4);
  // Rank 1 never reported: the summary says so.
  const auto line = hang_summary(*store, "kiln/g", 2, milliseconds(100));
  ASSERT_TRUE(line.has_value());
  EXPECT_HAS(*line, "hang: rank 1 did not arrive; rank 0 waited ");
  EXPECT_HAS(*line, " at all_reduce #2; no report from rank 1");
  fs::remove_all(dir);
}

// kill -9 of the agent takes its store with it: a rank that can no longer reach the store exits
// with an error after store_lost_exit instead of training on unwatched.
void watch_until_the_store_goes(bool keep_store) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "t");
  auto store = std::make_shared<TcpStore>("127.0.0.1", server->port(), "t", milliseconds(5000));
  WatchdogOptions o;
  o.ns = "kiln/g";
  o.store_lost_exit = milliseconds(300);
  o.start_thread = false;
  HangWatchdog wd(store, o);
  EXPECT_FALSE(wd.check());
  if (!keep_store) server.reset();
  for (int i = 0; i < 20; ++i) {
    wd.check();
    std::this_thread::sleep_for(milliseconds(50));
  }
  std::fprintf(stderr, "still running\n");
  std::_Exit(0);
}

TEST(HangWatchdogDeathTest, LostStoreEndsTheRank) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(watch_until_the_store_goes(false), ::testing::ExitedWithCode(1),
              "kiln: error: watchdog: rank 0 lost the store for 0\\.[3-9] s \\(.*\\); the agent "
              "that served it is gone, exiting");
  EXPECT_EXIT(watch_until_the_store_goes(true), ::testing::ExitedWithCode(0), "still running");
}

TEST(HangWatchdog, NoHangNoSummary) {
  MemoryStore store;
  EXPECT_FALSE(hang_summary(store, "kiln/none", 2, milliseconds(10)).has_value());
}

// Real collectives: rank 1 sleeps between two collectives (outside any) while rank 0 waits in
// the second; every rank reports before rank 0's collective fails, and the summary names rank 1.
TEST(HangWatchdog, RankOutsideAnyCollectiveIsNamed) {
  auto store = std::make_shared<MemoryStore>();
  const fs::path dir = temp_dir("gloo");
  std::atomic<bool> rank0_failed{false};
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      WatchdogOptions wo;
      wo.ns = "kiln/world";
      wo.rank = r;
      wo.world_size = 2;
      wo.timeout = milliseconds(1000);
      wo.poll = milliseconds(50);
      wo.report_dir = dir;
      auto wd = std::make_shared<HangWatchdog>(store, wo);
      GlooOptions o;
      o.timeout = milliseconds(1000);
      o.watchdog = wd;
      auto comm = make_gloo_communicator(store, r, 2, o);
      wd->set_step(7);
      float x = 1;
      comm->all_reduce(&x, 1, ReduceOp::kSum);
      if (r == 1) {
        // Stuck in a "step": until rank 0's collective gave up.
        for (int i = 0; i < 100 && !rank0_failed; ++i)
          std::this_thread::sleep_for(milliseconds(50));
        EXPECT_TRUE(wd->fired());
        return;
      }
      try {
        comm->all_reduce(&x, 1, ReduceOp::kSum);
        ADD_FAILURE() << "rank 0's second all_reduce should time out";
      } catch (const std::exception& e) {
        EXPECT_HAS(std::string(e.what()), "rank 1 did not arrive");
      }
      rank0_failed = true;
    });
  }
  for (auto& t : ts) t.join();
  const auto line = hang_summary(*store, "kiln/world", 2, milliseconds(100));
  ASSERT_TRUE(line.has_value());
  EXPECT_HAS(*line,
             "hang: rank 1 stopped at step 7 outside any collective (last: all_reduce #1 done ");
  EXPECT_HAS(*line, "; rank 0 waited 1.0 s at all_reduce #2");
  EXPECT_HAS(read_file(dir / "rank-00001.txt"), "now: not in a collective since all_reduce #1 ");
  EXPECT_HAS(read_file(dir / "rank-00000.txt"), "; missing: rank 1\n");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
