// Worker mode: join the group (store + Gloo), then run a training function with a
// WorkerContext. Used for workers spawned by kiln's agent and for ranks started by an external
// launcher (torchrun, mpirun, srun) that already assigned them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/comm/pair_auth.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/launch/comm_choice.h"
#include "kiln/train/runtime.h"

namespace kiln {

struct WorkerSpec {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1, node_rank = 0, nnodes = 1;
  std::string master_addr = "127.0.0.1";
  int store_port = 0;
  bool host_store = false;               // rank 0 serves the store itself (no kiln agent ran)
  std::string store_listen = "0.0.0.0";  // where a hosted store listens
  std::string token;
  double timeout_s = 300;
  int threads = 0;  // 0: leave OpenMP's setting
  // Recorded in the run's metadata; see WorkerIdentity.
  std::string topology_source = "default", launcher = "external";
  std::string run_dir;  // WorkerContext::run_dir()
  int keep_last = 0;
  std::string hang_dir;  // the watchdog's report directory ("" : store and log only)
  // What chooses the communicator (LaunchOptions::device, ::communicator).
  DeviceRequest device = DeviceRequest::kCpu;
  CommRequest communicator = CommRequest::kAuto;
  // Gloo's pairs prove they hold `token` (GlooOptions::authenticate; LaunchOptions).
  PairAuth authenticate_pairs = PairAuth::kAuto;
  // An external launcher's ranks agree on it after joining (LaunchOptions::identity; kiln's own
  // agents agree before spawning): a difference fails every rank with one line naming the key,
  // the ranks and both values.
  std::vector<std::pair<std::string, std::string>> identity;
};

// Joins the group and runs `fn`; returns its exit code. Errors become kiln::Error.
int run_worker(const WorkerSpec& spec, const TrainFn& fn);

}  // namespace kiln
