// A same-host data path for a Gloo group's bulk collectives: one shared memory segment with two
// slots per rank, so that an all-gather, reduce-scatter or all-reduce among processes of one host
// is a copy into this rank's slot and a copy (or a reduction) out of its peers', instead of TCP
// over loopback (two kernel copies per byte and the socket stack; on a 2-core host that was most
// of FSDP's communication cost). Internal to kiln_comm: the Gloo communicator's thread
// calls it, one operation at a time in issue order, and falls back to Gloo's TCP when a group
// has none (its ranks on several hosts, or no usable /dev/shm).
//
// Rounds: an operation moves at most slot_bytes per rank per round. In round g (the same on
// every rank: every rank runs the same operations in the same order) a rank waits until its
// peers have finished reading its slot g % 2 (round g - 2), fills it, publishes ready = g, reads
// every peer's slot once their ready reaches g, and publishes done = g. The counters are futexes
// in the segment: a waiting rank sleeps in the kernel, not on the CPU its compute needs.
//
// Direct reads: where every rank may read its peers' memory (process_vm_readv, as MPI's
// cross-memory attach), a large all-gather is one round in which each rank copies its peers'
// parts straight out of their buffers: one copy per byte instead of two.
//
// Results: reductions fold the ranks' contributions in rank order (0, 1, ..., size - 1) with the
// reduction Gloo would use, so every rank computes the same bits for the same element and an
// all-reduce leaves every rank identical.
//
// Trust: the segment is created 0600 under a random name in /dev/shm, mapped by the group's
// ranks (same uid), and unlinked as soon as every rank has it, so nothing outlives the group.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kiln/comm/store.h"

namespace kiln {

class ShmLane {
 public:
  using Clock = std::chrono::steady_clock;
  // c[i] = a[i] (op) b[i] for n elements; c may alias a or b (gloo_detail::ReduceFn).
  using ReduceFn = void (*)(void* c, const void* a, const void* b, size_t n);
  static constexpr size_t kDefaultSlotBytes = size_t{2} << 20;

  // The segment a group of `size` ranks maps (each rank touches all of it): for the memory plan.
  static size_t segment_bytes(int size, size_t slot_bytes = kDefaultSlotBytes);

  // Collective over the group (`store`: its namespace): rank 0 creates the segment, the others
  // map it, and all agree. Returns null on every rank unless every rank could map it. Throws
  // kiln::Error when a peer does not answer within `timeout`.
  // allow_direct false: never read peers' memory directly (tests of the slot path).
  static std::unique_ptr<ShmLane> open(Store& store, int rank, int size,
                                       std::chrono::milliseconds timeout,
                                       size_t slot_bytes = kDefaultSlotBytes,
                                       bool allow_direct = true);
  ~ShmLane();
  ShmLane(const ShmLane&) = delete;
  ShmLane& operator=(const ShmLane&) = delete;

  // out (size * bytes) = concat over ranks of in (bytes); in may alias out + rank * bytes.
  void all_gather(void* out, const void* in, size_t bytes, Clock::time_point deadline);
  // out (n elements of elem bytes) = fold over ranks of in[rank * n, (rank + 1) * n); in holds
  // size * n elements; out may alias in + rank * n.
  void reduce_scatter(void* out, const void* in, size_t n, size_t elem, ReduceFn fn,
                      Clock::time_point deadline);
  // data (n elements) = fold over ranks of data, on every rank.
  void all_reduce(void* data, size_t n, size_t elem, ReduceFn fn, Clock::time_point deadline);
  // Whether large all-gathers read peers' memory directly (see above).
  bool direct() const { return direct_; }
  // After a failed operation: every peer's wait fails now instead of at its deadline.
  void abort();

 private:
  ShmLane(void* base, size_t bytes, int rank, int size, size_t slot_bytes);
  uint8_t* slot(int rank, uint32_t round) const;
  // Waits until every peer finished round - 2 (its reads of this rank's slot for this round).
  uint8_t* begin_round(Clock::time_point deadline);
  // Publishes this rank's slot for the current round, then waits for every peer's.
  void publish_and_wait(Clock::time_point deadline);
  void end_round();
  void all_gather_direct(uint8_t* out, const uint8_t* mine, size_t bytes,
                         Clock::time_point deadline);
  static bool probe_direct_reads(Store& store, int rank, int size, uint64_t cookie, void* base,
                                 std::chrono::milliseconds timeout);
  // Below this an all-gather goes through the slots: one round either way, and no syscall.
  static constexpr size_t kDirectMinBytes = size_t{64} << 10;

  void* base_;
  size_t bytes_;
  int rank_, size_;
  size_t slot_bytes_;
  uint32_t round_ = 0;
  bool direct_ = false;  // every rank may read every peer's memory (probe_direct_reads)
};

}  // namespace kiln
