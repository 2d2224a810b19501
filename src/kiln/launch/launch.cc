#include "kiln/launch/launch.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <thread>

#include "kiln/base/dir_lock.h"
#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/base/random_token.h"
#include "kiln/base/stop_request.h"
#include "kiln/kernels/device/gpu_assignment.h"
#include "kiln/kernels/device/host_cpu.h"
#include "kiln/launch/agent.h"
#include "kiln/launch/private_network.h"
#include "kiln/launch/store_token.h"
#include "kiln/launch/worker.h"

namespace kiln {

namespace {

int single_process(const LaunchOptions& o, const TrainFn& fn, const std::string& topology_source) {
  if (o.graceful_stop) install_stop_handlers();
  auto comm = make_local_communicator();
  WorkerIdentity id;
  id.topology_source = topology_source;
  WorkerContext ctx(std::move(id), *comm, o.run_dir, o.keep_last);
  return fn(ctx);
}

// auto: CPU groups only. NCCL inside the namespace (loopback only) has never run on a GPU, so a
// GPU group keeps the host's network unless dist.private_network is on.
bool wants_private_network(PrivateNetwork mode, DeviceRequest device) {
  if (mode != PrivateNetwork::kAuto) return mode == PrivateNetwork::kOn;
  return device == DeviceRequest::kCpu ||
         (device == DeviceRequest::kAuto && visible_gpu_count() == 0);
}

std::string hang_dir(const LaunchOptions& o) {
  if (!o.hang_dir.empty()) return o.hang_dir;
  return o.run_dir.empty() ? "" : (fs::path(o.run_dir) / "hang").string();
}

}  // namespace

void check_threads_per_worker(int threads) {
  const int cpus = usable_cpu_count();
  if (threads > cpus) {
    fail(
        "dist.threads_per_worker is {}; at most {}, the CPUs this process may run on (more "
        "threads than CPUs only slow a worker down, and far more crash libgomp; 0 divides them "
        "between the local workers)",
        threads, cpus);
  }
}

int launch(const LaunchOptions& o, const TrainFn& fn) {
  const char* spawned = std::getenv("KILN_WORKER");
  check_threads_per_worker(o.threads_per_worker);
  const Topology t = discover_topology(o.flags);
  const bool agent = spawned == nullptr && t.agent_spawns_workers;
  const int nproc = o.flags.nproc_per_node.value_or(t.local_world_size > 1 ? t.local_world_size
                                                                           : o.nproc_per_node);
  // Global rank 0's process holds the output directory; workers it spawns inherit the lock.
  // In a private network the supervisor that re-ran this agent holds it, and so do we: the
  // descriptor is inherited.
  std::optional<DirLock> lock;
  if (!o.lock_dir.empty() && spawned == nullptr && t.rank == 0 && !in_private_network()) {
    lock.emplace(o.lock_dir, "output.dir");
  }
  // A single-node group's agent re-runs itself in a network namespace of its own
  // (private_network.h), before it listens or spawns anything.
  if (agent && t.num_nodes == 1 && nproc > 1 && !in_private_network() &&
      wants_private_network(o.private_network, o.device)) {
    if (const auto status = run_in_private_network(o.private_network)) {
      return *status;
    }
  }
  if (!agent) {
    if (t.world_size == 1 && spawned == nullptr) return single_process(o, fn, t.source);
    WorkerSpec w;
    w.rank = t.rank;
    w.world_size = t.world_size;
    w.local_rank = t.local_rank;
    w.local_world_size = t.local_world_size;
    w.node_rank = t.node_rank;
    w.nnodes = t.num_nodes;
    w.master_addr = t.master_addr;
    w.timeout_s = o.timeout_s;
    w.run_dir = o.run_dir;
    w.keep_last = o.keep_last;
    w.hang_dir = hang_dir(o);
    w.device = o.device;
    w.communicator = o.communicator;
    w.authenticate_pairs = o.authenticate_pairs;
    w.identity = o.identity;
    if (spawned != nullptr) {  // ours: the agent passed the store's address and token
      const char* port = std::getenv("KILN_STORE_PORT");
      const char* token = std::getenv("KILN_STORE_TOKEN");
      w.store_port = port ? std::atoi(port) : t.master_port;
      w.token = token ? token : "";
      const char* source = std::getenv("KILN_TOPOLOGY_SOURCE");
      w.topology_source = source ? source : t.source;
      w.launcher = "kiln-agent";
    } else {
      // An external launcher's rank: rank 0 serves the store. Under torchrun MASTER_PORT is
      // torch's own store, so kiln's listens one port above unless KILN_STORE_PORT says.
      const char* sp = std::getenv("KILN_STORE_PORT");
      w.store_port =
          sp ? std::atoi(sp) : t.master_port + (std::getenv("TORCHELASTIC_RUN_ID") ? 1 : 0);
      w.host_store = true;
      // Every rank on this host: the store need not be reachable from anywhere else.
      const bool local = t.num_nodes == 1 && is_loopback_address(t.master_addr);
      w.store_listen = local ? "127.0.0.1" : "0.0.0.0";
      w.token = job_store_token(!local);
      w.topology_source = t.source;
      const int cores = usable_cpu_count();
      w.threads =
          o.threads_per_worker > 0 ? o.threads_per_worker : std::max(1, cores / t.local_world_size);
    }
    if (o.graceful_stop) install_stop_handlers();
    return run_worker(w, fn);
  }
  // This process is the node agent.
  if (nproc == 1 && t.num_nodes == 1) return single_process(o, fn, t.source);
  AgentSpec a;
  a.nproc_per_node = nproc;
  a.nnodes = t.num_nodes;
  a.node_rank = t.node_rank;
  a.master_addr = t.master_addr;
  a.master_port = t.num_nodes > 1 || o.flags.master_port ? t.master_port : 0;  // 0: any free
  a.threads_per_worker = o.threads_per_worker;
  a.worker_args = o.worker_args;
  a.max_restarts = o.max_restarts;
  a.restart_args = o.restart_args;
  a.topology_source = t.source;
  a.timeout_s = o.timeout_s;
  a.hang_dir = hang_dir(o);
  a.graceful_stop = o.graceful_stop;
  a.sigterm_grace_s = o.sigterm_grace_s;
  a.identity = o.identity;
  // Inside a private network: tell the supervisor this agent is alive (a frozen one is killed).
  const auto heartbeat = in_private_network() ? SupervisorHeartbeat::start() : nullptr;
  // Several hosts: node 0's store listens on every interface, so only an operator's secret
  // will do. Several agents on this host (MASTER_ADDR on loopback): a job id or
  // KILN_STORE_TOKEN. One node: the agent hands its workers a random token.
  a.token = t.num_nodes > 1 ? job_store_token(!is_loopback_address(t.master_addr)) : random_token();
  return run_agent(a);
}

}  // namespace kiln
