// What every rank adds up once per optimizer step, in one host all-reduce before the step's
// backward: the step's loss denominator and token count, and how this rank's background
// checkpoint write is doing (the write's thread never touches the communicator).
#pragma once

#include <array>

#include "kiln/comm/communicator.h"

namespace kiln {

struct StepCounters {
  double targets = 0;         // predicted tokens (the loss denominator)
  double tokens = 0;          // tokens processed
  double writes_running = 0;  // ranks whose checkpoint write is still running
  double writes_failed = 0;   // ranks whose checkpoint write failed

  // Sums every field over the group (collective).
  void all_reduce(Communicator& comm) {
    std::array<double, 4> v = {targets, tokens, writes_running, writes_failed};
    comm.all_reduce(v.data(), v.size(), ReduceOp::kSum);
    targets = v[0];
    tokens = v[1];
    writes_running = v[2];
    writes_failed = v[3];
  }
};

}  // namespace kiln
