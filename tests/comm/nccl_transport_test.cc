// The NCCL log parser on real log lines (NCCL 2.18-2.29, aws-ofi-nccl), as NCCL_DEBUG=INFO with
// NCCL_DEBUG_SUBSYS=INIT,NET writes them; and that dist.require_transport accepts what it reports.
#include "kiln/comm/nccl_transport.h"

#include <gtest/gtest.h>

#include "kiln/comm/transport.h"

namespace kiln {
namespace {

// Two hosts over TCP: NCCL's internal socket net (no IB device, no plugin).
constexpr const char* kSocketLog =
    R"(node0:13571:13571 [0] NCCL INFO Bootstrap : Using enp10s0:10.10.7.107<0>
node0:13571:13571 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory
node0:13571:13571 [0] NCCL INFO NET/Plugin : No plugin found, using internal implementation
node0:13571:13571 [0] NCCL INFO cudaDriverVersion 11070
node0:13571:13600 [0] NCCL INFO NET/IB : No device found.
node0:13571:13600 [0] NCCL INFO NET/Socket : Using [0]enp10s0:10.10.7.107<0>
node0:13571:13600 [0] NCCL INFO Using network Socket
node0:13571:13600 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/direct pointer
node0:13571:13600 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/Socket/0
)";

// AWS p5en: aws-ofi-nccl over libfabric's efa provider.
constexpr const char* kEfaLog =
    R"(8h200-2:6831:6831 [0] NCCL INFO Bootstrap: Using enp71s0:10.1.2.3<0>
8h200-2:6831:6840 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.13.2
8h200-2:6831:6840 [0] NCCL INFO NET/OFI Using Libfabric version 1.22
8h200-2:6831:6840 [0] NCCL INFO NET/OFI Selected Provider is efa (found 16 nics)
8h200-2:6831:6840 [0] NCCL INFO NET/OFI NIC group 7 device #0 0000:a3:00.0
8h200-2:6831:6840 [0] NCCL INFO NET/OFI Creating one domain per process
8h200-2:6831:6840 [0] NCCL INFO NET/OFI Support for global registrations: true
8h200-2:6831:6840 [0] NCCL INFO PROFILER/Plugin: Could not find: libnccl-profiler.so.
8h200-2:6831:6840 [0] NCCL INFO Using network Libfabric
8h200-2:6831:6840 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
8h200-2:6831:6840 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/Libfabric/0/GDRDMA
)";

// InfiniBand: the internal IB net.
constexpr const char* kIbLog =
    R"(gpu01:124172:124172 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.
gpu01:124172:124452 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>
gpu01:124172:124452 [0] NCCL INFO Using network IB
gpu01:124172:124452 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC
gpu01:124172:124452 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via SHM/direct/direct
)";

// One host, loopback forced (NCCL_SOCKET_IFNAME=lo, NCCL_IB_DISABLE=1).
constexpr const char* kLoopbackLog =
    R"(axa:3048391:3048566 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
axa:3048391:3048566 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to lo
axa:3048391:3048566 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>
axa:3048391:3048566 [0] NCCL INFO Using network Socket
axa:3048391:3048566 [0] NCCL INFO Could not get speed from /sys/class/net/lo/speed. Defaulting to 10 Gbps.
)";

// The IB net tried first and failed (an IB library but no device): NCCL falls back to sockets.
constexpr const char* kIbFallbackLog =
    R"(VM-16-64-ubuntu:28471:28471 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so
VM-16-64-ubuntu:28471:28471 [0] NCCL INFO NET/IB : No device found.
VM-16-64-ubuntu:28471:28471 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:172.17.16.64<0>
VM-16-64-ubuntu:28471:28471 [0] NCCL INFO Failed to initialize NET plugin IB
VM-16-64-ubuntu:28471:28471 [0] NCCL INFO NET/Socket : Using [0]eth0:172.17.16.64<0>
VM-16-64-ubuntu:28471:28471 [0] NCCL INFO Using network Socket
)";

TEST(NcclTransport, SocketNet) {
  const TransportInfo t = parse_nccl_transport(kSocketLog);
  EXPECT_EQ(t.library, CommLibrary::kNccl);
  EXPECT_EQ(t.net, "socket");
  EXPECT_EQ(t.iface, "enp10s0");
  EXPECT_EQ(t.address, "10.10.7.107");
  EXPECT_EQ(t.plugin, "");
  EXPECT_EQ(t.intra, std::vector<std::string>{"p2p"});
  EXPECT_EQ(transport_text(t), "nccl socket enp10s0 10.10.7.107 p2p");
}

TEST(NcclTransport, EfaThroughAwsOfiNccl) {
  const TransportInfo t = parse_nccl_transport(kEfaLog);
  EXPECT_EQ(t.net, "efa");
  EXPECT_EQ(t.plugin, "aws-ofi-nccl");
  EXPECT_EQ(t.iface, "");
  EXPECT_EQ(transport_text(t), "nccl efa (aws-ofi-nccl) p2p");
}

TEST(NcclTransport, EfaWhicheverLineComesFirst) {
  // Older aws-ofi-nccl names the net "AWS Libfabric"; the provider line may follow it.
  const TransportInfo t = parse_nccl_transport(
      "h:1:2 [0] NCCL INFO Using network AWS Libfabric\n"
      "h:1:2 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)\n");
  EXPECT_EQ(transport_text(t), "nccl efa (aws-ofi-nccl)");
  // aws-ofi-nccl builds that print no NIC count, and a provider followed by more words.
  EXPECT_EQ(transport_text(
                parse_nccl_transport("h:1:2 [0] NCCL INFO NET/OFI Selected Provider is efa\r\n")),
            "nccl efa (aws-ofi-nccl)");
  EXPECT_EQ(transport_text(parse_nccl_transport(
                "h:1:2 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct\n")),
            "nccl efa (aws-ofi-nccl)");
  // Libfabric without the provider line: the plugin is known, the fabric is not.
  EXPECT_EQ(transport_text(parse_nccl_transport("NCCL INFO Using network Libfabric\n")),
            "nccl libfabric (aws-ofi-nccl)");
}

TEST(NcclTransport, InfiniBand) {
  const TransportInfo t = parse_nccl_transport(kIbLog);
  EXPECT_EQ(transport_text(t), "nccl ib mlx5_0 p2p shm");
  EXPECT_FALSE(t.shm_lane);  // NCCL's shm path is an intra-node path, not Gloo's lane
  EXPECT_EQ(t.intra, (std::vector<std::string>{"p2p", "shm"}));
}

TEST(NcclTransport, IbFailedThenSockets) {
  EXPECT_EQ(transport_text(parse_nccl_transport(kIbFallbackLog)), "nccl socket eth0 172.17.16.64");
}

TEST(NcclTransport, NothingSaid) {
  EXPECT_EQ(parse_nccl_transport("").library, CommLibrary::kNccl);
  EXPECT_EQ(transport_text(parse_nccl_transport("")), "nccl ?");
  EXPECT_EQ(transport_text(parse_nccl_transport("NCCL INFO cudaDriverVersion 12040\n")), "nccl ?");
}

TEST(NcclTransport, RequireTransportReadsIt) {
  const TransportInfo efa = parse_nccl_transport(kEfaLog);
  const TransportInfo sock = parse_nccl_transport(kSocketLog);
  const TransportInfo lo = parse_nccl_transport(kLoopbackLog);
  const TransportInfo ib = parse_nccl_transport(kIbLog);
  EXPECT_TRUE(transport_satisfies(efa, "efa"));
  EXPECT_FALSE(transport_satisfies(efa, "socket"));
  EXPECT_FALSE(transport_satisfies(efa, "gloo-tcp"));
  EXPECT_TRUE(transport_satisfies(sock, "socket"));
  EXPECT_FALSE(transport_satisfies(sock, "efa"));
  EXPECT_FALSE(transport_satisfies(sock, "loopback"));
  EXPECT_FALSE(transport_satisfies(sock, "gloo-tcp"));
  EXPECT_TRUE(transport_satisfies(lo, "loopback"));
  EXPECT_FALSE(transport_satisfies(lo, "socket"));
  EXPECT_FALSE(transport_satisfies(ib, "efa"));
  EXPECT_FALSE(transport_satisfies(ib, "socket"));
  EXPECT_FALSE(transport_satisfies(parse_nccl_transport(""), "efa"));
}

}  // namespace
}  // namespace kiln
