#include "kiln/train/runtime.h"

#include "kiln/base/error.h"

namespace kiln {

void WorkerContext::make_groups() {
  if (intra_) return;
  KILN_CHECK(comm != nullptr);
  if (world_size != num_nodes * local_world_size) {
    fail("hybrid sharding needs the same number of workers on every node ({} workers, {} nodes)",
         world_size, num_nodes);
  }
  std::vector<int> intra, inter;
  for (int l = 0; l < local_world_size; ++l) intra.push_back(node_rank * local_world_size + l);
  for (int n = 0; n < num_nodes; ++n) inter.push_back(n * local_world_size + local_rank);
  intra_ = comm->split(intra, "intra");
  inter_ = comm->split(inter, "inter");
}

Communicator& WorkerContext::intra_node() {
  make_groups();
  return *intra_;
}

Communicator& WorkerContext::inter_node() {
  make_groups();
  return *inter_;
}

}  // namespace kiln
