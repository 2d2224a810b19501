// CPU time for benchmarks: the whole machine's busy seconds and this process's own, so a figure
// taken while other processes used the cores is visible as such (others = machine - own).
#pragma once

namespace kiln {

// Busy CPU seconds of the whole machine, all cores (first line of /proc/stat); 0 if unreadable.
double machine_busy_seconds();
// User + system CPU seconds of this process (getrusage).
double own_cpu_seconds();

}  // namespace kiln
