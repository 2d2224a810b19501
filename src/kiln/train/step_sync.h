// The step's sync record: what every rank adds up once per optimizer step, in one host
// all-reduce before the step's backward. Every control decision of the step is read from the
// sums, so every rank makes the same one: the loss denominator and token count, how the
// background checkpoint writes are doing (commit once none is running, fail if one failed; the
// write's thread never touches the communicator) and whether any rank was asked to stop (stop
// after this step). The step's other all-reduce, at its end, carries metrics only.
#pragma once

#include <array>

#include "kiln/comm/communicator.h"

namespace kiln {

struct StepSync {
  double targets = 0;         // predicted tokens (the loss denominator)
  double pairs = 0;           // preference pairs (a dpo run's loss denominator: Batch::num_pairs)
  double tokens = 0;          // tokens processed
  double writes_running = 0;  // ranks whose checkpoint write is still running
  double writes_failed = 0;   // ranks whose checkpoint write failed
  double stop_requests = 0;   // ranks asked to stop (WorkerContext::stop_requested)

  // Sums every field over the group (collective).
  void all_reduce(Communicator& comm) {
    std::array<double, 6> v = {targets,        pairs,         tokens,
                               writes_running, writes_failed, stop_requests};
    comm.all_reduce(v.data(), v.size(), ReduceOp::kSum);
    targets = v[0];
    pairs = v[1];
    tokens = v[2];
    writes_running = v[3];
    writes_failed = v[4];
    stop_requests = v[5];
  }
  // After all_reduce: every rank stops after this step.
  bool stop() const { return stop_requests > 0; }
};

}  // namespace kiln
