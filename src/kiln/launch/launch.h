// One entry point for every way a kiln program runs: decides this process's role and runs a
// training function (`TrainFn`) on every worker.
//   - a single process: fn runs here with world size 1;
//   - node agent (N local workers, or kiln as the per-node agent of a multi-node job): spawns
//     workers that re-run this binary with `worker_args`, hosts the store on node 0;
//   - worker (spawned by the agent, or a rank started by torchrun/mpirun/srun): joins the group
//     and runs fn.
// `kiln train` is one client; examples/custom_train.cc shows a user's own program.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/comm/pair_auth.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/launch/comm_choice.h"
#include "kiln/launch/private_network.h"
#include "kiln/launch/topology.h"
#include "kiln/train/runtime.h"

namespace kiln {

struct LaunchOptions {
  TopologyFlags flags;
  int nproc_per_node = 1;      // used when neither flags nor the environment say
  int threads_per_worker = 0;  // 0: cores / local workers
  double timeout_s = 300;
  std::vector<std::string> worker_args;  // this program's arguments, for spawned workers
  int max_restarts = 0;                  // see AgentSpec
  std::vector<std::string> restart_args;
  // The run directory of a TrainFn: WorkerContext::report(metrics, dir) commits checkpoints under
  // run_dir/checkpoints (keeping the newest keep_last), report() writes run_dir/metrics.jsonl;
  // latest_checkpoint() looks there. kiln train: output.dir (train() requires it).
  std::string run_dir;
  int keep_last = 0;
  // Where every worker writes its hang report (rank-RRRRR.txt); "" : run_dir/hang when run_dir
  // is set, else reports go to the store and the log only. kiln train: <output.dir>/hang.
  std::string hang_dir;
  // The run's output directory, locked (DirLock, <lock_dir>/.kiln.lock) by global rank 0's
  // process (the single process, node 0's agent or an external launcher's rank 0) for the run's
  // life: a second run into it fails at once naming it. "" : no lock. kiln train: output.dir.
  std::string lock_dir;
  // `fn` honours stop requests (base/stop_request.h: it polls stop_requested(), commits a
  // checkpoint and returns kExitStopped): SIGTERM/SIGINT then ask every worker to stop, and the
  // agent waits sigterm_grace_s for them (AgentSpec). kiln train: on, failure.sigterm_grace_s.
  bool graceful_stop = false;
  double sigterm_grace_s = 25;
  // The device fn's backend will use (kiln train: train.device) and the communicator asked for
  // (dist.communicator): each worker of a group chooses NCCL or Gloo from them
  // (launch/comm_choice.h) and, on CUDA, makes GPU local_rank its current device first.
  DeviceRequest device = DeviceRequest::kCpu;
  CommRequest communicator = CommRequest::kAuto;
  // A single-node group's agent runs it in a private network namespace (private_network.h);
  // kiln train: dist.private_network.
  PrivateNetwork private_network = PrivateNetwork::kAuto;
  // Whether the Gloo pairs authenticate their connections with the job's token (WorkerSpec);
  // kiln train: dist.authenticate_pairs.
  PairAuth authenticate_pairs = PairAuth::kAuto;
  // (key, value) pairs every node of a multi-node job must share, compared by the agents before
  // any worker starts (launch/formation.h) along with --nnodes and --nproc-per-node; a
  // difference fails every node with one line naming the key, the node and both values. kiln
  // train: the run identity keys (train/run_identity.h) and their values.
  std::vector<std::pair<std::string, std::string>> identity;
};

// dist.threads_per_worker's bound: the CPUs this process may run on (more OpenMP threads than
// that only slow a worker down, and far more crash libgomp). Throws kiln::Error naming the key,
// the value and the limit.
void check_threads_per_worker(int threads);

int launch(const LaunchOptions& opts, const TrainFn& fn);

}  // namespace kiln
