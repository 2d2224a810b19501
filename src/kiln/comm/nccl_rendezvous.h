// The host side of an NCCL group's start, through kiln's store (no GPU needed, so CI tests it):
// rank 0's ncclUniqueId travels as bytes under the group's namespace, and every rank marks its
// arrival first so that a rank whose init times out can name the ranks that never came.
//
// Keys, in the group's namespace (a PrefixStore named after the group):
//   nccl/arrived/<rank>   set by each rank before it waits for the id or starts init
//   nccl/id               rank 0's unique id (NCCL_UNIQUE_ID_BYTES bytes)
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "kiln/comm/store.h"

namespace kiln {

// Marks this rank's arrival; rank 0 makes the id (make_id) and publishes it, the others wait up
// to `timeout` for it. Returns the id's bytes. On timeout: kiln::Error naming `group` and the
// ranks that had not arrived.
Bytes exchange_nccl_id(Store& group_store, const std::string& group, int rank, int world_size,
                       std::chrono::milliseconds timeout, const std::function<Bytes()>& make_id);

// The ranks of a group of `world_size` that have not marked their arrival.
std::vector<int> nccl_ranks_not_arrived(Store& group_store, int world_size);

// "ranks 2, 3 did not arrive" / "every rank arrived".
std::string describe_not_arrived(const std::vector<int>& missing);

}  // namespace kiln
