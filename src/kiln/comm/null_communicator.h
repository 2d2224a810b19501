// A communicator that moves nothing, of a given world size and rank: the memory plan runs FSDP
// through it (train/memory_plan.h). Every collective completes at once and leaves its buffers as
// they are; what the real communicator would keep in host memory of its own is reported, sized
// by that communicator's own rules: Gloo's ring reduce-scatter partial sums
// (ring_reduce_scatter_scratch_bytes, grown to the largest call) or the same-host shared memory
// lane's segment (ShmLane::segment_bytes).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "kiln/comm/communicator.h"

namespace kiln {

// What the imitated communicator keeps of its own.
enum class CommScratch {
  kNone,     // NCCL, or one rank
  kGloo,     // Gloo's ring reduce-scatter scratch
  kShmLane,  // Gloo over the same-host shared memory lane: its segment
};

// Called with (this communicator, bytes held now) whenever its own memory grows.
using ScratchSink = std::function<void(const void* key, size_t bytes)>;

std::unique_ptr<Communicator> make_null_communicator(int rank, int world_size, CommScratch scratch,
                                                     ScratchSink sink = nullptr);

}  // namespace kiln
