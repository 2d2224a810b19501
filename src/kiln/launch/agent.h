// The node agent: spawns this node's workers (the kiln binary itself, in worker mode), hosts
// the rendezvous store on node 0, prefixes every output line with the worker's rank, forwards
// SIGINT/SIGTERM, and tears the whole group down as soon as any worker fails.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kiln {

struct AgentSpec {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                   // 0 on a single node: the store picks a free port
  std::string token;                     // per-job secret every worker presents to the store
  int threads_per_worker = 0;            // 0: cores / nproc_per_node
  double grace_s = 10;                   // SIGTERM -> SIGKILL delay when tearing the group down
  std::vector<std::string> worker_args;  // arguments after the program name
  // Failure policy: restart the whole group this many times, adding restart_args (for kiln
  // train: train.resume=auto) to the workers' arguments. With several nodes every agent stops
  // its workers when any node's worker fails, and node 0's budget and decision (through the
  // store) hold for all.
  int max_restarts = 0;
  std::vector<std::string> restart_args;
  std::string topology_source = "default";  // passed to workers for their run metadata
  double timeout_s = 300;  // dist.timeout_s: bounds the agents' agreement waits too
  std::string hang_dir;    // where workers write hang reports ("" : store only), for messages
  // The workers honour a stop request (LaunchOptions::graceful_stop): on SIGTERM or SIGINT the
  // agent sends them SIGTERM and gives them sigterm_grace_s to commit a checkpoint and exit with
  // kExitStopped (base/stop_request.h), which it then returns; a second stop request (a signal
  // more than 2 s after the first: copies of one signal arriving together are one request), or
  // the deadline, kills them. Otherwise a signal tears the group down at once. Workers that all
  // complete meanwhile (the signal came after the last step) make it return 0.
  bool graceful_stop = false;
  double sigterm_grace_s = 25;
  // What every node must agree on before a worker starts (formation.h; LaunchOptions::identity).
  std::vector<std::pair<std::string, std::string>> identity;
};

// Runs the agent until every worker has exited. Returns 0 when all succeeded, kExitStopped when
// all stopped on request (graceful_stop); otherwise the
// group was torn down and, while restarts remain, started again; at the end the history of
// failures (rank, exit code or signal, last step; or the hang line naming the stuck rank) is
// reported and a non-zero status returned.
int run_agent(const AgentSpec& spec);

}  // namespace kiln
