// Fault injection for tests of failure handling (never set in production runs).
//
// KILN_FAULT="RANK:STEP:KIND[@POINT][:ATTEMPT]" makes rank RANK, in optimizer step STEP
// (1-based), at POINT, exit with code 3 ("exit"), abort ("abort"), be killed with SIGKILL
// ("kill"), stop responding ("hang") or send SIGTERM to its parent, the node agent, and carry on
// ("term": a preemption arriving at that moment); only in restart attempt ATTEMPT of the group
// (default 0, the first; "*": every attempt). POINTs:
//   step        (default) at the start of the step, before any collective;
//   collective  inside the first collective the rank enters during the step, after it started;
//   checkpoint  while writing the checkpoint saved after the step, with part of its shard written;
//   commit      while committing checkpoint STEP: its manifest written, the renames that put it
//               in place (and set aside an older copy of the same step) not all done;
//   prune       while retention removes a checkpoint, during step STEP: renamed, not yet deleted;
//   eval        as the evaluation after step STEP begins.
// Each fault fires at most once per process.
#pragma once

#include <cstdint>

namespace kiln {

// The trainer calls this at the start of every step (the "step" point fires here).
void fault_begin_step(int rank, int64_t step);
// Code at a named point calls this; fires when KILN_FAULT names this rank, the current step and
// the point.
void fault_point(const char* point);
// As above, for work that belongs to step `step` but may run later or on another thread (a
// checkpoint written in the background while the next step trains).
void fault_point(const char* point, int64_t step);

}  // namespace kiln
