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

#include <string_view>

#include "kiln/comm/transport_info.h"

namespace kiln {

// An NCCL group's transport (library nccl): its net ("efa", "socket", "ib", "libfabric",
// another plugin's name lower-cased; "" when the log said nothing about it), the plugin
// ("aws-ofi-nccl", another plugin's name; "" : NCCL's internal nets), the socket net's first
// interface and address or IB's first HCA, and the intra-node paths seen ("p2p", "shm",
// "nvls"). transport_text() of it: "nccl efa (aws-ofi-nccl)", "nccl socket eth0 10.0.0.2",
// "nccl ib mlx5_0", with " p2p"/" shm"/" nvls" after; "nccl ?" when the net is not known.
TransportInfo parse_nccl_transport(std::string_view log);

}  // namespace kiln
