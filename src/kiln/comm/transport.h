// What a run may require of its transport, and whether a communicator's transport string
// (Communicator::transport(): "local", "gloo-tcp eth0 10.0.0.2", ...) delivers it. One place
// decides, so `kiln doctor --require transport=...` and the recipe's dist.require_transport
// mean the same thing.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "kiln/base/named_values.h"

namespace kiln {

// The kinds, in documentation order:
//   gloo-tcp  Gloo over TCP, on any interface (its own transport, "gloo-tcp ...", or kiln's
//             authenticated one, "gloo-tcp+auth ...")
//   socket    TCP over a non-loopback interface (can reach other hosts)
//   loopback  TCP over loopback (every rank on this host)
//   efa       AWS Elastic Fabric Adapter (NCCL through libfabric; the transport string names
//             "efa" as a word)
enum class TransportKind { kGlooTcp, kSocket, kLoopback, kEfa };
inline constexpr std::array<Named<TransportKind>, 4> kTransportKindNames = {{
    {TransportKind::kGlooTcp, "gloo-tcp"},
    {TransportKind::kSocket, "socket"},
    {TransportKind::kLoopback, "loopback"},
    {TransportKind::kEfa, "efa"},
}};

// True when `transport` delivers `kind`.
bool transport_satisfies(const std::string& transport, TransportKind kind);
// The same for a kind's name (parsed first; an unknown one is an error listing the kinds).
bool transport_satisfies(const std::string& transport, const std::string& kind);

// True when the transport's address is a loopback one (lo, 127.0.0.0/8, ::1).
bool transport_is_loopback(const std::string& transport);

// True when a Gloo group carries its bulk collectives through the same-host shared memory lane
// (its transport ends in the word "shm", shm_lane.h). NCCL's "shm" intra-node path is not one.
bool transport_has_shm_lane(const std::string& transport);

}  // namespace kiln
