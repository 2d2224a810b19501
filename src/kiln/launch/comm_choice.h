// Which communicator a worker builds (the recipe's dist.communicator, the device, the GPUs):
//   auto  NCCL when the backend is CUDA and every rank of this node has a GPU of its own
//         (local world size <= visible GPUs); else Gloo, staging device buffers through pinned
//         host memory when the backend is CUDA (NCCL refuses two ranks on one GPU).
//   nccl  NCCL; an error when the backend is not CUDA or the node has fewer GPUs than ranks.
//   gloo  Gloo (staged when the backend is CUDA).
// A pure function, so each case is tested without a GPU.
#pragma once

#include <string>

#include "kiln/comm/comm_request.h"

namespace kiln {

enum class CommKind { kGloo, kGlooStaged, kNccl };

struct CommChoice {
  CommKind kind = CommKind::kGloo;
  std::string reason;  // one line for the log: why this one
};

// cuda: the worker's backend is CUDA; visible_gpus: what this process sees (0 without CUDA).
// kiln::Error when `request` cannot be met.
CommChoice choose_communicator(CommRequest request, bool cuda, int local_world_size,
                               int visible_gpus);

}  // namespace kiln
