// A single-node worker group in a network namespace of its own, so that no process outside the
// job can connect to its listeners.
//
// Gloo's TCP pairs (and NCCL's bootstrap) listen on ephemeral ports and take the first
// connection that arrives as their peer, with no handshake: on the host's loopback any local
// process, of any uid, can connect first and fail the group's formation. The agent of a
// single-node group therefore re-runs itself, before it starts the store or a worker, in a new
// network namespace (Linux `unshare(CLONE_NEWNET)`, inside a new user namespace when not root)
// whose only interface is its own loopback. The store, every worker and every collective then
// live there, out of reach of the host's processes. The process that was started stays as a
// thin supervisor: it forwards SIGINT/SIGTERM (the agent runs in a process group of its own, so a
// signal to the supervisor's group, Ctrl-C included, reaches it once, through the supervisor),
// returns the group's exit status, and takes the group down with it when it is killed (the agent
// runs with PR_SET_PDEATHSIG). It also hears
// the agent's heartbeat (SupervisorHeartbeat): an agent silent for as long as its workers wait
// for a lost store (the watchdog's store_lost_exit, 5 s) is frozen (SIGSTOP, a cgroup freezer),
// and the supervisor kills it, which ends its workers too, and fails in one line naming it,
// instead of waiting forever.
//
// Several nodes need the host's network, so this applies to one node only; docs/security.md
// says what protects a multi-node job.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "kiln/comm/private_network_mode.h"

namespace kiln {

// dist.private_network's modes are PrivateNetwork (comm/private_network_mode.h). Inside,
// KILN_SOCKET_IFNAME and NCCL_SOCKET_IFNAME are lo, the only interface there.

// True in the process that runs_in_private_network() started (it sets KILN_PRIVATE_NETWORK=1).
bool in_private_network();

// Re-runs this program (/proc/self/exe with the arguments it was started with) in a new network
// namespace and waits for it. Returns its exit status (128 + N when killed by signal
// N). Returns std::nullopt when no namespace could be made and `mode` is kAuto, after a warning
// naming why (the caller then goes on in the host's network); fails when `mode` is kOn.
std::optional<int> run_in_private_network(PrivateNetwork mode);

// The agent's side of the heartbeat: a thread that writes a byte to the supervisor's socket
// (KILN_SUPERVISOR_FD) every 250 ms for as long as the object lives.
class SupervisorHeartbeat {
 public:
  // nullptr when this process has no supervisor.
  static std::unique_ptr<SupervisorHeartbeat> start();
  explicit SupervisorHeartbeat(int fd);
  ~SupervisorHeartbeat();
  SupervisorHeartbeat(const SupervisorHeartbeat&) = delete;
  SupervisorHeartbeat& operator=(const SupervisorHeartbeat&) = delete;

 private:
  int fd_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kiln
