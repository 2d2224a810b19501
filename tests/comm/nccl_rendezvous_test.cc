// The host side of an NCCL group's start, without a GPU: the unique id's trip through the store
// (with NCCL, the real ncclGetUniqueId: it needs no GPU or driver) and the failure that names the
// ranks that never arrived.
#include "kiln/comm/nccl_rendezvous.h"

#include <gtest/gtest.h>

#include <thread>

#include "kiln/base/error.h"

#ifdef KILN_HAVE_CUDA
#include <nccl.h>
#endif

namespace kiln {
namespace {

using std::chrono::milliseconds;

// Runs exchange_nccl_id on `world` threads; returns each rank's bytes.
std::vector<Bytes> exchange(int world, const std::function<Bytes()>& make_id) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<Bytes> got(world);
  std::vector<std::thread> threads;
  for (int r = world - 1; r >= 0; --r) {  // rank 0 last: the others really wait for it
    threads.emplace_back([&, r] {
      PrefixStore group(std::string("world"), store);
      got[r] = exchange_nccl_id(group, "world", r, world, milliseconds(10000), make_id);
    });
  }
  for (auto& t : threads) t.join();
  return got;
}

TEST(NcclRendezvous, EveryRankGetsRankZerosBytes) {
  int made = 0;
  const std::vector<Bytes> got = exchange(4, [&] {
    ++made;
    return Bytes{1, 2, 3, 0, 255};
  });
  EXPECT_EQ(made, 1);
  for (const Bytes& b : got) EXPECT_EQ(b, (Bytes{1, 2, 3, 0, 255}));
}

#ifdef KILN_HAVE_CUDA
TEST(NcclRendezvous, RealUniqueIdRoundTrip) {
  ncclUniqueId made{};
  const std::vector<Bytes> got = exchange(2, [&] {
    const ncclResult_t r = ncclGetUniqueId(&made);
    if (r != ncclSuccess) fail("ncclGetUniqueId: {}", ncclGetErrorString(r));
    return Bytes(reinterpret_cast<const uint8_t*>(&made),
                 reinterpret_cast<const uint8_t*>(&made) + sizeof made);
  });
  ASSERT_EQ(got[1].size(), sizeof(ncclUniqueId));
  EXPECT_EQ(got[0], got[1]);
  ncclUniqueId back;
  std::memcpy(&back, got[1].data(), sizeof back);
  EXPECT_EQ(std::memcmp(&back, &made, sizeof back), 0);
  // Not all zeros: NCCL really wrote a bootstrap handle into it.
  bool nonzero = false;
  for (uint8_t b : got[1]) nonzero = nonzero || b != 0;
  EXPECT_TRUE(nonzero);
}
#endif

TEST(NcclRendezvous, MissingRankZeroIsNamed) {
  auto store = std::make_shared<MemoryStore>();
  PrefixStore group(std::string("world-3"), store);
  // Rank 2 arrived and gave up; rank 1 waits now; ranks 0 and 3 never came.
  group.set("nccl/arrived/2", to_bytes("1"));
  try {
    exchange_nccl_id(group, "world-3", 1, 4, milliseconds(200), [] { return Bytes{}; });
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("group world-3"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 of 4"), std::string::npos) << m;
    EXPECT_NE(m.find("ranks 0, 3 did not arrive"), std::string::npos) << m;
  }
  EXPECT_EQ(nccl_ranks_not_arrived(group, 4), (std::vector<int>{0, 3}));
  EXPECT_EQ(describe_not_arrived({}), "every rank arrived");
  EXPECT_EQ(describe_not_arrived({5}), "rank 5 did not arrive");
}

}  // namespace
}  // namespace kiln
