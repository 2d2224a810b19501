// The Gloo communicator: CPU collectives over TCP (Gloo's tcp transport, or kiln's authenticated
// one, auth_tcp/device.h, when GlooOptions::authenticate says so), or shared memory for
// the bulk ones when every rank is on one host (GlooOptions::same_host_shm), bootstrapped
// through a kiln::Store. Each communicator owns one communication thread that runs its operations
// in issue order, so the caller's compute overlaps the transfers; Work::wait() rethrows an
// operation's failure as kiln::Error naming the operation, its sequence number in the group and the
// ranks that never arrived at it. With a staging backend (GlooOptions::staging_backend) it also
// takes device buffers, staged through pinned host memory.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "kiln/comm/communicator.h"
#include "kiln/comm/pair_auth.h"
#include "kiln/comm/store.h"
#include "kiln/comm/watchdog.h"
#include "kiln/kernels/ops.h"

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
  // Device buffers: null (the CPU backend), every buffer is host memory and Gloo works on it in
  // place. Set (a GPU that NCCL cannot serve, e.g. several ranks sharing it), an operation given
  // a stream `after` takes device buffers of this backend: it copies them to pinned host memory
  // on the backend's compute stream once `after` reached the call, Gloo runs on the copy, and
  // the result is copied back on that stream when the caller waits (Work::wait(stream) in stream
  // order, wait_host() before it returns); an op never waited for leaves its output unchanged.
  // Ops with `after` null still take host buffers. The backend must outlive the communicator
  // and its sub-groups. Tests set the CPU stream emulation here to run this path without a GPU.
  const Backend* staging_backend = nullptr;
  // Bulk collectives (all-gather, reduce-scatter, all-reduce of f32/bf16/f16) among ranks that
  // share a host go through shared memory instead of TCP (shm_lane.h); the group uses it only
  // when every rank could map the segment. Off: always TCP.
  bool same_host_shm = true;
  // The job's secret (KILN_STORE_TOKEN). With it, and `authenticate` on (or auto and the group
  // spans hosts), every pair's connection proves it knows the token (auth_tcp/handshake.h): a
  // stray or hostile connection to a listener is rejected and formation carries on. Without
  // authentication, Gloo's tcp transport takes the first connection to each of its listeners.
  // Every rank of a group must agree (they do when all get the same options).
  std::string pair_token;
  PairAuth authenticate = PairAuth::kAuto;
};

// Connects `world_size` ranks full-mesh (blocking until all have joined or the timeout passes).
// The store must be safe to use from several threads: the communication and progress threads
// of every group built from it use it concurrently.
std::unique_ptr<Communicator> make_gloo_communicator(std::shared_ptr<Store> store, int rank,
                                                     int world_size, const GlooOptions& opts);

}  // namespace kiln
