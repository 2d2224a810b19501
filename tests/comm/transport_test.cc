// TransportInfo: its one text (the exact strings the log, run_meta.json and the docs quote), what
// each TransportKind accepts, and its JSON form between ranks.
#include "kiln/comm/transport.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "common/error_of.h"
#include "kiln/base/error.h"
#include "kiln/base/json.h"
#include "kiln/comm/transport_info.h"

namespace kiln {
namespace {

TransportInfo info(CommLibrary library, std::string_view net, const std::string& iface,
                   const std::string& address) {
  TransportInfo t;
  t.library = library;
  t.net = std::string(net);
  t.iface = iface;
  t.address = address;
  return t;
}

TransportInfo gloo(const std::string& iface, const std::string& address) {
  return info(CommLibrary::kGloo, kNetSocket, iface, address);
}

TransportInfo nccl(const std::string& net, const std::string& iface = "",
                   const std::string& address = "") {
  return info(CommLibrary::kNccl, net, iface, address);
}

TransportInfo with(TransportInfo t, void (*edit)(TransportInfo&)) {
  edit(t);
  return t;
}

const TransportInfo kLocal{.library = CommLibrary::kLocal};

TEST(TransportInfo, TextOfEveryLibrary) {
  EXPECT_EQ(transport_text(kLocal), "local");
  EXPECT_EQ(transport_text({.library = CommLibrary::kNone, .note = "memory plan"}),
            "none (memory plan)");
  EXPECT_EQ(transport_text(TransportInfo{}), "none");

  const TransportInfo eth = gloo("eth0", "10.0.0.2");
  EXPECT_EQ(transport_text(eth), "gloo-tcp eth0 10.0.0.2");
  EXPECT_EQ(transport_text(with(eth, [](TransportInfo& t) { t.authenticated = true; })),
            "gloo-tcp+auth eth0 10.0.0.2");
  const TransportInfo lo = gloo("lo", "127.0.0.1");
  EXPECT_EQ(transport_text(with(lo, [](TransportInfo& t) { t.shm_lane = true; })),
            "gloo-tcp lo 127.0.0.1 shm");
  EXPECT_EQ(transport_text(with(lo, [](TransportInfo& t) { t.staged = true; })),
            "gloo-tcp lo 127.0.0.1 staged");
  EXPECT_EQ(transport_text(
                with(lo, [](TransportInfo& t) { t.authenticated = t.shm_lane = t.staged = true; })),
            "gloo-tcp+auth lo 127.0.0.1 shm staged");
  EXPECT_EQ(transport_text(gloo("?", "10.0.0.9")), "gloo-tcp ? 10.0.0.9");

  EXPECT_EQ(transport_text(with(nccl("socket", "eth0", "10.0.0.2"),
                                [](TransportInfo& t) { t.intra = {"p2p"}; })),
            "nccl socket eth0 10.0.0.2 p2p");
  EXPECT_EQ(transport_text(with(nccl("efa"),
                                [](TransportInfo& t) {
                                  t.plugin = "aws-ofi-nccl";
                                  t.intra = {"p2p", "shm", "nvls"};
                                })),
            "nccl efa (aws-ofi-nccl) p2p shm nvls");
  EXPECT_EQ(transport_text(nccl("ib", "mlx5_0")), "nccl ib mlx5_0");
  EXPECT_EQ(transport_text(nccl("")), "nccl ?");
  EXPECT_EQ(transport_text(with(nccl(""),
                                [](TransportInfo& t) {
                                  t.note =
                                      "NCCL_DEBUG set without NCCL_DEBUG_FILE: its log is not "
                                      "read";
                                })),
            "nccl ? (NCCL_DEBUG set without NCCL_DEBUG_FILE: its log is not read)");
}

// Every kind against every transport kiln reports; a kind accepts exactly the ones listed.
TEST(TransportInfo, SatisfiesEachKind) {
  const TransportInfo lo = gloo("lo", "127.0.0.1"), eth = gloo("eth0", "10.0.0.2");
  const TransportInfo lo_shm = with(lo, [](TransportInfo& t) { t.shm_lane = true; });
  const TransportInfo auth_eth = with(eth, [](TransportInfo& t) { t.authenticated = true; });
  const TransportInfo auth_lo = with(lo, [](TransportInfo& t) { t.authenticated = true; });
  const TransportInfo staged_eth = with(eth, [](TransportInfo& t) { t.staged = true; });
  const TransportInfo v6_lo = gloo("?", "::1");
  const TransportInfo nccl_eth = nccl("socket", "eth0", "10.0.0.2");
  const TransportInfo nccl_lo = nccl("socket", "lo", "127.0.0.1");
  const TransportInfo nccl_efa = with(nccl("efa"), [](TransportInfo& t) {
    t.plugin = "aws-ofi-nccl";
    t.intra = {"p2p", "shm"};
  });
  const TransportInfo nccl_ib = nccl("ib", "mlx5_0");
  const TransportInfo nccl_fabric =
      with(nccl("libfabric"), [](TransportInfo& t) { t.plugin = "aws-ofi-nccl"; });
  const TransportInfo nccl_unknown = nccl("");
  const TransportInfo none{.library = CommLibrary::kNone, .note = "memory plan"};
  // An interface named like a kind is no network of that kind.
  const TransportInfo gloo_named_efa = gloo("efa", "10.0.0.3");

  struct Case {
    const char* name;
    TransportInfo t;
    bool gloo_tcp, socket, loopback, efa;
  };
  const Case cases[] = {
      {"gloo lo", lo, true, false, true, false},
      {"gloo eth0", eth, true, true, false, false},
      {"gloo lo shm", lo_shm, true, false, true, false},
      {"gloo+auth eth0", auth_eth, true, true, false, false},
      {"gloo+auth lo", auth_lo, true, false, true, false},
      {"gloo eth0 staged", staged_eth, true, true, false, false},
      {"gloo ::1", v6_lo, true, false, true, false},
      {"gloo iface efa", gloo_named_efa, true, true, false, false},
      {"nccl socket eth0", nccl_eth, false, true, false, false},
      {"nccl socket lo", nccl_lo, false, false, true, false},
      {"nccl efa", nccl_efa, false, false, false, true},
      {"nccl ib", nccl_ib, false, false, false, false},
      {"nccl libfabric", nccl_fabric, false, false, false, false},
      {"nccl ?", nccl_unknown, false, false, false, false},
      {"local", kLocal, false, false, false, false},
      {"none", none, false, false, false, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(transport_satisfies(c.t, TransportKind::kGlooTcp), c.gloo_tcp) << c.name;
    EXPECT_EQ(transport_satisfies(c.t, TransportKind::kSocket), c.socket) << c.name;
    EXPECT_EQ(transport_satisfies(c.t, TransportKind::kLoopback), c.loopback) << c.name;
    EXPECT_EQ(transport_satisfies(c.t, TransportKind::kEfa), c.efa) << c.name;
    // The name form reads the same table.
    for (const auto& k : kTransportKindNames) {
      EXPECT_EQ(transport_satisfies(c.t, std::string(k.name)), transport_satisfies(c.t, k.value))
          << c.name << " " << k.name;
    }
  }
  EXPECT_THROW(transport_satisfies(eth, "infiniband"), Error);
}

TEST(TransportInfo, Loopback) {
  EXPECT_TRUE(transport_is_loopback(gloo("lo", "127.0.0.1")));
  EXPECT_TRUE(transport_is_loopback(gloo("?", "127.0.1.1")));
  EXPECT_TRUE(transport_is_loopback(gloo("?", "::1")));
  EXPECT_FALSE(transport_is_loopback(gloo("eth0", "10.0.0.2")));
  EXPECT_FALSE(transport_is_loopback(gloo("eth0", "10.127.0.1")));
  EXPECT_FALSE(transport_is_loopback(kLocal));
}

TEST(TransportInfo, JsonRoundTrip) {
  TransportInfo full = nccl("efa", "eth0", "10.0.0.2");
  full.plugin = "aws-ofi-nccl";
  full.authenticated = full.shm_lane = full.staged = true;
  full.intra = {"p2p", "nvls"};
  full.note = "a note";
  for (const TransportInfo& t :
       {full, gloo("lo", "127.0.0.1"), kLocal, TransportInfo{.note = "memory plan"}}) {
    const Json j = parse_json(transport_info_json(t).dump(), "test");
    EXPECT_EQ(transport_info_from_json(j, "rank 1's transport"), t) << j.dump();
  }
  // The wire form names each field.
  const Json j = transport_info_json(full);
  EXPECT_EQ(j.at("library"), "nccl");
  EXPECT_EQ(j.at("net"), "efa");
  EXPECT_EQ(j.at("shm_lane"), true);
  EXPECT_EQ(j.at("intra"), Json({"p2p", "nvls"}));
}

TEST(TransportInfo, JsonErrorsNameTheField) {
  auto error = [](const Json& j) {
    return testing::error_of([&] { transport_info_from_json(j, "rank 3's transport"); });
  };
  Json j = transport_info_json(gloo("lo", "127.0.0.1"));
  j.erase("shm_lane");
  EXPECT_EQ(error(j), "rank 3's transport: missing field 'shm_lane'");
  j = transport_info_json(kLocal);
  j["library"] = "mpi";
  EXPECT_EQ(error(j), "rank 3's transport: library: 'mpi' is not one of local, gloo, nccl, none");
  j = transport_info_json(kLocal);
  j["net"] = 3;
  EXPECT_EQ(error(j), "rank 3's transport: field 'net' is not a string");
  j = transport_info_json(kLocal);
  j["staged"] = "yes";
  EXPECT_EQ(error(j), "rank 3's transport: field 'staged' is not true or false");
  j = transport_info_json(kLocal);
  j["intra"] = Json::array({1});
  EXPECT_EQ(error(j), "rank 3's transport: field 'intra' holds a non-string");
  EXPECT_EQ(error(Json::array()), "rank 3's transport: expected a JSON object, got array");
}

}  // namespace
}  // namespace kiln
