// dist.private_network: whether a single-node group runs in a network namespace of its own
// (launch/private_network.h), with its names listed once (base/named_values.h).
#pragma once

#include <array>

#include "kiln/base/named_values.h"

namespace kiln {

// auto (for a CPU group, a private network when the kernel allows one, else a warning and the
// host's; a GPU group keeps the host's: NCCL inside the namespace has not run on a GPU yet), on
// (refuse to start without one), off (the host's network).
enum class PrivateNetwork { kAuto, kOn, kOff };
inline constexpr std::array<Named<PrivateNetwork>, 3> kPrivateNetworkNames = {{
    {PrivateNetwork::kAuto, "auto"},
    {PrivateNetwork::kOn, "on"},
    {PrivateNetwork::kOff, "off"},
}};

}  // namespace kiln
