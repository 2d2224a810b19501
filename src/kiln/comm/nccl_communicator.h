// The NCCL communicator: GPU collectives on device buffers, one GPU per rank. Built only with
// CUDA (KILN_HAVE_CUDA). The caller makes the rank's GPU current first (cuda_use_device).
//
// Start: rank 0's ncclUniqueId travels through kiln's store (nccl_rendezvous.h); init is
// non-blocking (ncclCommInitRankConfig with blocking = 0, then ncclCommGetAsyncError polled), so
// a rank that never comes makes init fail after the timeout naming the ranks missing, instead of
// hanging; the half-made communicator is aborted.
//
// Order: the communicator has a CUDA stream of its own. An op with `after` waits for an event
// recorded there (cudaStreamWaitEvent) and records one after itself: Work::wait(stream) makes
// `stream` wait for it, Work::wait_host() polls it and NCCL's asynchronous error. `after` null:
// the buffers are host memory; they are staged through device memory on the communicator's
// stream (host scalars, barrier, run metadata).
//
// Hangs: every op is recorded with the HangWatchdog (as Gloo's are) and watched by a thread of
// the communicator: an op not done after the timeout makes the watchdog report (naming the
// ranks whose published progress stayed behind), then the communicator is aborted
// (ncclCommAbort) and every later wait and op of the group throws the failure. Unlike Gloo's, a
// failure after Work::wait(stream) does not reach that stream's synchronize() (that would cost a
// host function per collective on the stream): it surfaces at the group's next wait_host() or
// op, and the trainer's per-step host all-reduce is one.
//
// Transport: unless the user set NCCL_DEBUG, NCCL's INFO log (subsystems INIT,NET) goes to a
// per-rank file that transport_info() is read from (nccl_transport.h): "nccl efa (aws-ofi-nccl)",
// "nccl socket eth0 10.0.0.2 p2p", ...
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "kiln/comm/communicator.h"
#include "kiln/comm/store.h"
#include "kiln/comm/watchdog.h"

namespace kiln {

struct NcclOptions {
  // Init, split and every operation fail after this long.
  std::chrono::milliseconds timeout{300000};
  // Namespace of this group's keys in the store (a restart gets its own, as for Gloo).
  std::string group_name = "world";
  std::shared_ptr<HangWatchdog> watchdog;  // optional
  // Where NCCL's INFO log goes when NCCL_DEBUG is unset ("" : kiln-nccl-rank<R>-<pid>.log in
  // the temporary directory, kept for post-mortems).
  std::string debug_file;
};

std::unique_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Store> store, int rank,
                                                     int world_size, const NcclOptions& opts);

}  // namespace kiln
