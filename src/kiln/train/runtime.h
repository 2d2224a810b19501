// The runtime API: what a training function gets on every worker. The trainer (train()) is one
// client; a user's own C++ training function can be another (see examples/custom_train.cc).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "kiln/base/json.h"
#include "kiln/dist/communicator.h"

namespace kiln {

struct WorkerContext {
  int rank = 0, world_size = 1;              // in the whole group
  int local_rank = 0, local_world_size = 1;  // on this node
  int node_rank = 0, num_nodes = 1;
  Communicator* comm = nullptr;  // the world group
  // Who started this worker, for run metadata: the topology convention (Topology::source,
  // "torchrun", "slurm", ...) and "single-process", "kiln-agent" or "external" (the launcher's
  // own ranks).
  std::string topology_source = "default";
  std::string launcher = "single-process";

  // Sub-groups for hybrid sharding, created on first use (collective: every rank calls both in
  // the same order). intra: this node's ranks; inter: ranks with this local_rank on every node.
  Communicator& intra_node();
  Communicator& inter_node();

  // Reports a metrics object (rank 0's reports go to the run's metrics.jsonl and log).
  void report(const Json& metrics) const {
    if (reporter) reporter(metrics);
  }
  std::function<void(const Json&)> reporter;

 private:
  std::unique_ptr<Communicator> intra_, inter_;
  void make_groups();
};

using TrainFn = std::function<int(WorkerContext&)>;

}  // namespace kiln
