#include "kiln/comm/transport.h"

#include <gtest/gtest.h>

#include "kiln/base/error.h"

namespace kiln {
namespace {

TEST(Transport, Kinds) {
  const std::string lo = "gloo-tcp lo 127.0.0.1", eth = "gloo-tcp eth0 10.0.0.2";
  EXPECT_TRUE(transport_satisfies(lo, "gloo-tcp"));
  EXPECT_TRUE(transport_satisfies(eth, "gloo-tcp"));
  EXPECT_TRUE(transport_satisfies(lo, "loopback"));
  EXPECT_FALSE(transport_satisfies(eth, "loopback"));
  EXPECT_TRUE(transport_satisfies(eth, "socket"));
  EXPECT_FALSE(transport_satisfies(lo, "socket"));
  EXPECT_FALSE(transport_satisfies(eth, "efa"));
  // Ranks of one host with the shared memory lane: still Gloo over loopback for the rest.
  EXPECT_TRUE(transport_satisfies(lo + " shm", "gloo-tcp"));
  EXPECT_TRUE(transport_satisfies(lo + " shm", "loopback"));
  EXPECT_FALSE(transport_satisfies(lo + " shm", "socket"));
  // kiln's authenticated pairs: Gloo over TCP all the same.
  const std::string auth = "gloo-tcp+auth eth0 10.0.0.2";
  EXPECT_TRUE(transport_satisfies(auth, "gloo-tcp"));
  EXPECT_TRUE(transport_satisfies(auth, "socket"));
  EXPECT_FALSE(transport_satisfies(auth, "loopback"));
  EXPECT_TRUE(transport_satisfies("gloo-tcp+auth lo 127.0.0.1", "loopback"));
  // One process talks to nobody: no network transport at all.
  for (const char* k : {"gloo-tcp", "socket", "loopback", "efa"}) {
    EXPECT_FALSE(transport_satisfies("local", k)) << k;
  }
  // NCCL's, when it arrives: its net named as a word.
  EXPECT_TRUE(transport_satisfies("nccl efa aws-ofi-nccl", "efa"));
  EXPECT_FALSE(transport_satisfies("nccl efa aws-ofi-nccl", "socket"));
  EXPECT_TRUE(transport_satisfies("nccl socket eth0 10.0.0.2", "socket"));
  EXPECT_FALSE(transport_satisfies("gloo-tcp defaults 10.0.0.2", "efa"));
  EXPECT_THROW(transport_satisfies(eth, "infiniband"), Error);
}

TEST(Transport, ShmLaneIsAGlooGroupsWord) {
  EXPECT_TRUE(transport_has_shm_lane("gloo-tcp lo 127.0.0.1 shm"));
  EXPECT_TRUE(transport_has_shm_lane("gloo-tcp lo 127.0.0.1 shm staged"));
  EXPECT_FALSE(transport_has_shm_lane("gloo-tcp lo 127.0.0.1"));
  EXPECT_FALSE(transport_has_shm_lane("gloo-tcp lo 127.0.0.1 staged"));
  EXPECT_FALSE(transport_has_shm_lane("nccl socket lo 127.0.0.1 shm"));  // NCCL's own path
  EXPECT_FALSE(transport_has_shm_lane("local"));
}

}  // namespace
}  // namespace kiln
