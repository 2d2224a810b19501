#include "kiln/launch/comm_choice.h"

#include "kiln/base/error.h"

namespace kiln {

CommChoice choose_communicator(CommRequest request, bool cuda, int local_world_size,
                               int visible_gpus) {
  const bool gpu_each = cuda && local_world_size <= visible_gpus;
  if (request == CommRequest::kNccl) {
    if (!cuda) fail("dist.communicator=nccl needs train.device=cuda (the backend is the CPU)");
    if (!gpu_each) {
      fail(
          "dist.communicator=nccl: {} ranks on this node but {} GPU(s) visible; NCCL needs a GPU "
          "per rank (dist.communicator=gloo shares them)",
          local_world_size, visible_gpus);
    }
    return {CommKind::kNccl, "dist.communicator=nccl"};
  }
  if (!cuda) return {CommKind::kGloo, "the backend is the CPU"};
  if (request == CommRequest::kGloo) {
    return {CommKind::kGlooStaged, "dist.communicator=gloo, device buffers staged through host"};
  }
  if (gpu_each) {
    return {CommKind::kNccl, fmt::format("a GPU per rank ({} rank(s) on this node, {} GPU(s))",
                                         local_world_size, visible_gpus)};
  }
  return {CommKind::kGlooStaged,
          fmt::format("{} ranks share {} GPU(s) on this node (NCCL needs one each): Gloo, device "
                      "buffers staged through host",
                      local_world_size, visible_gpus)};
}

}  // namespace kiln
