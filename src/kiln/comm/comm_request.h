// dist.communicator: the communicator a run asks for, with its names listed once
// (base/named_values.h); launch/comm_choice.h decides what each request gets on a node.
#pragma once

#include <array>

#include "kiln/base/named_values.h"

namespace kiln {

enum class CommRequest { kAuto, kNccl, kGloo };
inline constexpr std::array<Named<CommRequest>, 3> kCommRequestNames = {{
    {CommRequest::kAuto, "auto"},
    {CommRequest::kNccl, "nccl"},
    {CommRequest::kGloo, "gloo"},
}};

}  // namespace kiln
