// The Gloo communicator: CPU collectives over TCP (Gloo's tcp transport), bootstrapped through a
// kiln::Store. Each communicator owns one communication thread that runs its operations in issue
// order, so the caller's compute overlaps the transfers; Work::wait() rethrows an operation's
// failure as kiln::Error naming the operation, its sequence number in the group and the ranks
// that never arrived at it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "kiln/distributed/communicator.h"
#include "kiln/distributed/store.h"
#include "kiln/distributed/watchdog.h"

namespace kiln {

struct GlooOptions {
  // Interface spec in KILN_SOCKET_IFNAME / NCCL_SOCKET_IFNAME syntax ("eth0", "^docker,lo",
  // "=ens5"); "" chooses (loopback when every rank of the group is on this host, else the first
  // non-loopback interface). See choose_interface().
  std::string ifname;
  // Bind the address this host name (or IP) resolves to instead; overrides `ifname`.
  std::string hostname;
  // Every operation, and the rendezvous, fails after this long without progress.
  std::chrono::milliseconds timeout{300000};
  // Namespace of this group's keys in the store. Give each restart of a job its own store
  // prefix (or group name): stale addresses from an earlier attempt would otherwise be used.
  std::string group_name = "world";
  // Records every operation of this group and its sub-groups for hang reports (optional).
  std::shared_ptr<HangWatchdog> watchdog;
};

// Connects `world_size` ranks full-mesh (blocking until all have joined or the timeout passes).
// The store must be safe to use from several threads: the communication and progress threads
// of every group built from it use it concurrently.
std::unique_ptr<Communicator> make_gloo_communicator(std::shared_ptr<Store> store, int rank,
                                                     int world_size, const GlooOptions& opts);

}  // namespace kiln
