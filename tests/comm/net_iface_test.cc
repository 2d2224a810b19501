#include "kiln/comm/net_iface.h"

#include <gtest/gtest.h>

#include "common/error_of.h"
#include "kiln/base/error.h"

namespace kiln {
namespace {

// lo, a docker bridge, two NICs and an InfiniBand port that is down.
std::vector<NetIface> fake() {
  return {
      {"lo", "127.0.0.1", true, true},      {"docker0", "172.17.0.1", false, true},
      {"eth0", "10.0.0.2", false, true},    {"eth1", "10.1.0.2", false, true},
      {"ib0", "192.168.0.2", false, false}, {"ens5", "10.2.0.2", false, true},
  };
}

std::string error_of(const std::string& spec, bool remote, const std::vector<NetIface>& a) {
  return testing::error_of([&] { choose_interface(spec, remote, a); });
}

TEST(NetIface, EmptySpecPicksLoopbackWhenAllPeersAreLocal) {
  EXPECT_EQ(choose_interface("", false, fake()), "lo");
}

TEST(NetIface, EmptySpecSkipsLoopbackAndBridgesWhenPeersAreRemote) {
  EXPECT_EQ(choose_interface("", true, fake()), "eth0");
  // Only a bridge besides loopback: better than failing.
  EXPECT_EQ(
      choose_interface("", true,
                       {{"lo", "127.0.0.1", true, true}, {"docker0", "172.17.0.1", false, true}}),
      "docker0");
}

TEST(NetIface, EmptySpecWithoutLoopbackFallsBackToANic) {
  EXPECT_EQ(choose_interface("", false, {{"eth0", "10.0.0.2", false, true}}), "eth0");
}

TEST(NetIface, PrefixListTakesFirstAvailableMatch) {
  EXPECT_EQ(choose_interface("eth", true, fake()), "eth0");
  EXPECT_EQ(choose_interface("ens,eth", true, fake()), "eth0");  // interface order, not spec order
  EXPECT_EQ(choose_interface("ens", true, fake()), "ens5");
  EXPECT_EQ(choose_interface(" ens , eth1 ", true, fake()), "eth1");
}

TEST(NetIface, DownInterfacesNeverMatch) {
  EXPECT_NE(error_of("ib", true, fake()).find("matches no interface that is up"),
            std::string::npos);
  EXPECT_EQ(choose_interface("ib,ens", true, fake()), "ens5");
}

TEST(NetIface, ExcludeList) {
  EXPECT_EQ(choose_interface("^lo,docker", true, fake()), "eth0");
  EXPECT_EQ(choose_interface("^lo,docker,eth", true, fake()), "ens5");
  EXPECT_EQ(choose_interface("^docker", false, fake()), "lo");
  EXPECT_EQ(choose_interface("^", true, fake()), "eth0");
}

TEST(NetIface, ExactNames) {
  EXPECT_EQ(choose_interface("=eth1", true, fake()), "eth1");
  EXPECT_NE(error_of("=eth", true, fake()).find("matches no interface"), std::string::npos);
  EXPECT_EQ(choose_interface("^=eth0", true, fake()), "docker0");
  EXPECT_EQ(choose_interface("^=lo,docker0,eth0", true, fake()), "eth1");
}

TEST(NetIface, InterfaceSelected) {
  EXPECT_TRUE(interface_selected("eth,lo", "lo"));
  EXPECT_TRUE(interface_selected("^docker", "lo"));  // an exclude list that forgets lo
  EXPECT_FALSE(interface_selected("^docker,lo", "lo"));
  EXPECT_FALSE(interface_selected("=l", "lo"));
  EXPECT_TRUE(interface_selected("^", "lo"));
  EXPECT_FALSE(interface_selected("", "lo"));  // no spec selects nothing explicitly
}

TEST(NetIface, NeverLoopbackWhenPeersAreRemote) {
  const std::string e = error_of("lo", true, fake());
  EXPECT_NE(e.find("never loopback when peers are on other hosts"), std::string::npos) << e;
  EXPECT_NE(e.find("eth0 10.0.0.2"), std::string::npos) << e;  // lists what is available
  EXPECT_EQ(choose_interface("lo", false, fake()), "lo");
  EXPECT_NE(error_of("", true, {{"lo", "127.0.0.1", true, true}}).find("no usable"),
            std::string::npos);
}

TEST(NetIface, ListsThisHostsLoopback) {
  bool loopback = false;
  for (const auto& i : list_interfaces()) {
    EXPECT_FALSE(i.name.empty());
    EXPECT_FALSE(i.address.empty());
    if (i.is_loopback && i.is_up) loopback = i.address.starts_with("127.");
  }
  EXPECT_TRUE(loopback);
}

}  // namespace
}  // namespace kiln
