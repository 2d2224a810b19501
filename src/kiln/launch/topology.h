// Who am I: this process's place among the job's workers, from the command line or whichever
// launcher started it. Two shapes come out:
//   - node agent (agent_spawns_workers): the launcher started one kiln per node (Kubeflow
//     Trainer, a Kubernetes indexed Job, flags typed by hand); this process is the node agent and
//     spawns local_world_size workers, global ranks rank .. rank + local_world_size - 1, with
//     rank = node_rank * local_world_size and local_rank = 0. worker_topology() gives each one's.
//   - worker: the launcher started every worker itself (torchrun, mpirun, srun); rank and
//     world_size are already this process's own, and nothing is spawned.
// Every node runs the same number of workers (world_size = num_nodes * local_world_size), except
// under Slurm with a cyclic distribution, where ranks need not be contiguous per node.
#pragma once

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

namespace kiln {

inline constexpr int kDefaultMasterPort = 29500;  // torchrun's, so existing manifests carry over

struct Topology {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // workers per node: nproc_per_node
  int node_rank = 0;
  int num_nodes = 1;
  std::string master_addr = "127.0.0.1";  // where node 0's agent serves the rendezvous store
  int master_port = kDefaultMasterPort;
  // The convention that supplied it: "flags", "torchrun", "kubeflow", "openmpi", "pmi", "slurm",
  // "k8s-indexed-job" or "default".
  std::string source = "default";
  bool agent_spawns_workers = true;
};

// Command-line values (--nnodes, --node-rank, --nproc-per-node, --master-addr, --master-port).
struct TopologyFlags {
  std::optional<int> nnodes, node_rank, nproc_per_node;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
};

// Resolves the topology. The first convention that applies wins:
//   1. flags       --node-rank given, or any flag given and no launcher below applies
//   2. torchrun    RANK (with WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
//                  GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT)                           worker
//                  A Kubeflow pod also carries RANK and WORLD_SIZE counting pods, not workers:
//                  with PET_NNODES set and no LOCAL_RANK, Kubeflow is taken instead.
//   3. kubeflow    PET_NNODES or PET_NODE_RANK (PET_NPROC_PER_NODE, PET_MASTER_ADDR,
//                  PET_MASTER_PORT; node rank from JOB_COMPLETION_INDEX when PET_NODE_RANK is
//                  absent)                                                               agent
//   4. openmpi     OMPI_COMM_WORLD_RANK (_SIZE, _LOCAL_RANK, _LOCAL_SIZE); node = rank / local
//                  size                                                                  worker
//   5. pmi         PMI_RANK, PMI_SIZE (MPI_LOCALRANKID, MPI_LOCALNRANKS when present, else one
//                  rank per node). Under srun (SLURM_PROCID set) without MPI_LOCALRANKID,
//                  Slurm is taken instead: its variables also say which ranks share a node.
//                                                                                        worker
//   6. slurm       SLURM_PROCID (SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_NNODES,
//                  SLURM_NTASKS_PER_NODE, else SLURM_TASKS_PER_NODE, else ntasks / nnodes)
//                                                                                        worker
//   7. k8s-indexed-job  JOB_COMPLETION_INDEX is the node rank; node count from --nnodes or
//                  KILN_NNODES, workers per node from --nproc-per-node or KILN_NPROC_PER_NODE
//                                                                                        agent
//   8. default     one node, one worker, 127.0.0.1                                       agent
// Flags still count under a launcher: --master-addr and --master-port always win; --nnodes and
// --nproc-per-node override an agent convention's values and must agree with a worker
// convention's (the launcher has already started the workers). The master address falls back
// to MASTER_ADDR (KILN_MASTER_ADDR for indexed Jobs), and is required once there is more than one
// node; a single node rendezvouses on 127.0.0.1. The port falls back to MASTER_PORT, then 29500.
// Empty variables count as unset. Throws kiln::Error naming the variables or flags for values
// that are not integers, negative, out of range (rank >= world size, local rank >= local world
// size, node rank >= nodes) or inconsistent (world size != nodes * workers per node).
Topology discover_topology(const TopologyFlags& flags,
                           const std::function<const char*(const char*)>& getenv = std::getenv);

// The worker view of local worker `local_rank` spawned by the node agent `node`.
Topology worker_topology(const Topology& node, int local_rank);

// One line for logs: "rank 3/8 (node 1/2, local 1/4), master 10.0.0.1:29500, from slurm" or
// "node agent 1/2 for ranks 4..7 of 8, master 10.0.0.1:29500, from kubeflow".
std::string describe_topology(const Topology& t);

}  // namespace kiln
