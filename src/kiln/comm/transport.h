// What a run may require of its transport, and whether a group's transport (its
// Communicator::transport_info(), transport_info.h) delivers it. One place decides, so
// `kiln doctor --require transport=...` and the recipe's dist.require_transport mean the same
// thing.
#pragma once

#include <array>
#include <string>

#include "kiln/base/named_values.h"
#include "kiln/comm/transport_info.h"

namespace kiln {

// The kinds, in documentation order:
//   gloo-tcp  Gloo over TCP, on any interface (Gloo's own pairs, "gloo-tcp ...", or kiln's
//             authenticated ones, "gloo-tcp+auth ...")
//   socket    TCP over a non-loopback interface (can reach other hosts): Gloo, NCCL's socket net
//   loopback  TCP over loopback (every rank on this host)
//   efa       AWS Elastic Fabric Adapter (NCCL through aws-ofi-nccl with libfabric's efa
//             provider, as NCCL's own log reports it)
// A single process (library local) and a communicator that moves nothing deliver none.
enum class TransportKind { kGlooTcp, kSocket, kLoopback, kEfa };
inline constexpr std::array<Named<TransportKind>, 4> kTransportKindNames = {{
    {TransportKind::kGlooTcp, "gloo-tcp"},
    {TransportKind::kSocket, "socket"},
    {TransportKind::kLoopback, "loopback"},
    {TransportKind::kEfa, "efa"},
}};

// True when `transport` delivers `kind`.
bool transport_satisfies(const TransportInfo& transport, TransportKind kind);
// The same for a kind's name (parsed first; an unknown one is an error listing the kinds).
bool transport_satisfies(const TransportInfo& transport, const std::string& kind);

}  // namespace kiln
