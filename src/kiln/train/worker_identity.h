// Who a worker is: its place in the group and who started it. A plain value the launcher fills
// in once (launch/launch.cc, launch/worker.cc); the services a worker's function uses (the
// communicator, metrics, checkpoint commits, step signals) are WorkerContext's (runtime.h).
// Not to be confused with the run identity (train/run_identity.h: recipe keys every node shares).
#pragma once

#include <string>

namespace kiln {

struct WorkerIdentity {
  int rank = 0, world_size = 1;              // in the whole group
  int local_rank = 0, local_world_size = 1;  // on this node
  int node_rank = 0, num_nodes = 1;
  // Who started this worker, for run metadata: the topology convention (Topology::source,
  // "torchrun", "slurm", ...) and "single-process", "kiln-agent" or "external" (the launcher's
  // own ranks).
  std::string topology_source = "default";
  std::string launcher = "single-process";
  int restart_attempt = 0;  // 0 in the first attempt, then 1, 2, ... after each group restart
};

}  // namespace kiln
