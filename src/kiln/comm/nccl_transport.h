// What NCCL itself says it uses, read from its INFO log (NCCL_DEBUG=INFO,
// NCCL_DEBUG_SUBSYS=INIT,NET): the network (its internal Socket or IB net, or a plugin such as
// aws-ofi-nccl over EFA) and the intra-node paths (P2P, SHM, NVLS). A pure function of the log
// text, so the parsing is tested on real log lines without a GPU. Compiled in every build.
//
// Lines it reads (the "host:pid:tid [dev] NCCL INFO " prefix is skipped):
//   NET/Plugin: Could not find: libnccl-net.so            (internal nets only)
//   NET/Plugin: Loaded net plugin Libfabric (v9)           (a plugin)
//   NET/OFI Selected Provider is efa (found 16 nics)       (aws-ofi-nccl's libfabric provider)
//   NET/Socket : Using [0]eth0:10.0.0.2<0>                 (the socket net's interfaces)
//   NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.2<0>
//   Using network Socket | IB | Libfabric | AWS Libfabric  (the net chosen)
//   Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM              (intra-node: P2P/..., SHM/..., NVLS)
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct NcclTransport {
  std::string net;      // "efa", "socket", "ib", another plugin's name lower-cased, "" : unknown
  std::string plugin;   // "aws-ofi-nccl", another plugin's name, "" : NCCL's internal nets
  std::string iface;    // the socket net's first interface ("eth0"), or IB's first HCA
  std::string address;  // the socket net's address on it ("10.0.0.2"), "" when not reported
  std::vector<std::string> intra;  // intra-node paths seen, first-seen order: "p2p", "shm", "nvls"
};

NcclTransport parse_nccl_transport(std::string_view log);

// Communicator::transport() of an NCCL group: "nccl efa (aws-ofi-nccl)", "nccl socket eth0
// 10.0.0.2", "nccl ib mlx5_0", with " p2p"/" shm"/" nvls" appended for the intra-node paths seen;
// "nccl ?" when the log said nothing about the network.
std::string nccl_transport_string(const NcclTransport& t);

}  // namespace kiln
