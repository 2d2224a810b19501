// The same-host shared memory lane on its own (the Gloo suite runs every collective through it
// too): operations of many rounds, agreement when a rank cannot map the segment, and a failed
// rank releasing its waiting peers at once.
#include "kiln/comm/shm_lane.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "common/rank_threads.h"
#include "kiln/base/error.h"
#include "kiln/comm/gloo_collectives.h"
#include "kiln/comm/store.h"

namespace kiln {
namespace {

using std::chrono::milliseconds;
using Body = std::function<void(ShmLane*, int)>;

// Opens a lane on `world` threads (each rank's own slot_bytes) and runs body.
void run_lane(int world, const std::vector<size_t>& slot_bytes, const Body& body,
              bool allow_direct = true) {
  auto store = std::make_shared<MemoryStore>();
  testing::run_rank_threads(world, [&](int r) {
    auto lane = ShmLane::open(*store, r, world, milliseconds(5000), slot_bytes[r], allow_direct);
    body(lane.get(), r);
  });
}

ShmLane::Clock::time_point soon() { return ShmLane::Clock::now() + milliseconds(5000); }

float value(int rank, size_t i) { return static_cast<float>((i * 3 + rank * 7) % 97) - 48.0f; }

// 4 KiB slots: every operation takes hundreds of rounds, both slots alternating; a large
// all-gather reads peers directly when allowed (threads of one process always may), else it
// goes through the slots too.
void every_operation(bool direct) {
  const int world = 3;
  const size_t n = 100003;  // odd: the last round is short
  run_lane(
      world, std::vector<size_t>(world, 4096),
      [&](ShmLane* lane, int rank) {
        ASSERT_NE(lane, nullptr);
        EXPECT_EQ(lane->direct(), direct);
        const auto sum = gloo_detail::reduce_fn(DType::F32, ReduceOp::kSum);
        std::vector<float> mine(n), all(world * n);
        for (size_t i = 0; i < n; ++i) mine[i] = value(rank, i);
        lane->all_gather(all.data(), mine.data(), n * sizeof(float), soon());
        for (int r = 0; r < world; ++r) {
          for (size_t i = 0; i < n; i += 997) ASSERT_EQ(all[r * n + i], value(r, i));
        }
        // In place: this rank's part already sits in the output.
        std::vector<float> in_place(world * n, 0.0f);
        std::copy(mine.begin(), mine.end(), in_place.begin() + rank * n);
        lane->all_gather(in_place.data(), in_place.data() + rank * n, n * sizeof(float), soon());
        ASSERT_EQ(in_place, all);

        std::vector<float> part(n);
        std::vector<float> contrib(world * n);
        for (size_t i = 0; i < world * n; ++i) contrib[i] = value(rank, i);
        lane->reduce_scatter(part.data(), contrib.data(), n, sizeof(float), sum, soon());
        for (size_t i = 0; i < n; i += 991) {
          float want = 0;
          for (int r = 0; r < world; ++r) want += value(r, rank * n + i);
          ASSERT_EQ(part[i], want) << i;
        }
        std::vector<float> x = mine;
        lane->all_reduce(x.data(), n, sizeof(float), sum, soon());
        for (size_t i = 0; i < n; i += 983) {
          ASSERT_EQ(x[i], value(0, i) + value(1, i) + value(2, i)) << i;
        }
      },
      direct);
}

TEST(ShmLane, ManyRoundsOfEveryOperationThroughTheSlots) { every_operation(false); }
TEST(ShmLane, ManyRoundsOfEveryOperationWithDirectReads) { every_operation(true); }

TEST(ShmLane, NoRankUsesItUnlessEveryRankMappedIt) {
  // Rank 1 expects another segment size than rank 0 made: it cannot map it, so nobody uses it.
  run_lane(3, {4096, 8192, 4096}, [](ShmLane* lane, int) { EXPECT_EQ(lane, nullptr); });
}

TEST(ShmLane, AFailedRankReleasesItsWaitingPeersAtOnce) {
  run_lane(2, {4096, 4096}, [](ShmLane* lane, int rank) {
    ASSERT_NE(lane, nullptr);
    std::vector<float> x(16, 1.0f), all(32);
    if (rank == 1) {
      std::this_thread::sleep_for(milliseconds(200));
      lane->abort();  // as the communicator does when its operation failed
      return;
    }
    const auto start = ShmLane::Clock::now();
    try {
      lane->all_gather(all.data(), x.data(), x.size() * sizeof(float),
                       ShmLane::Clock::now() + milliseconds(20000));
      ADD_FAILURE() << "rank 1 never took part";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the group failed on another rank"), std::string::npos)
          << e.what();
    }
    EXPECT_LT(ShmLane::Clock::now() - start, milliseconds(5000));
  });
}

TEST(ShmLane, AnAbsentPeerTimesOutNamingIt) {
  run_lane(2, {4096, 4096}, [](ShmLane* lane, int rank) {
    ASSERT_NE(lane, nullptr);
    if (rank == 1) return;
    std::vector<float> x(16, 1.0f), all(32);
    try {
      lane->all_gather(all.data(), x.data(), x.size() * sizeof(float),
                       ShmLane::Clock::now() + milliseconds(300));
      ADD_FAILURE() << "rank 1 never took part";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 did not arrive"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace kiln
