// The check of every memory access an emulated thread makes. The kernel sources are compiled with
// the kernel-address sanitizer's instrumentation (-fsanitize=kernel-address, every access a call,
// globals registered with redzones); its callbacks are defined here and check, for emulated
// threads only:
//   bounds     the access lies wholly in the thread's own stack, the launch's argument values
//              (read only), a device buffer, a __shared__ variable or the launch's dynamic shared
//              memory; else it is out of bounds (named by the nearest buffer or variable)
//   alignment  a 2-, 4-, 8- or 16-byte access of device or shared memory is aligned to its size
//   races      per byte, the last write and read (thread, epoch): two accesses of one byte, at
//              least one a write and not both atomic, conflict when made by different threads of
//              one block in one epoch (no __syncthreads between), or by different blocks of one
//              launch (nothing orders blocks). For device memory the last reader is kept, plus
//              whether several threads read in its epoch, so a write after reads by two other
//              blocks' threads can be missed; shared memory has no such gap within a phase.
//   init       a shared memory read of a byte no thread of the block has written
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/emul/block_run.h"
#include "kernels/emul/memory_map.h"

namespace kiln::emul {

enum class Access { kRead, kWrite, kAtomic };

// Checks an access of thread t of block b (faults through b). Returns the region accessed (null
// for the thread's stack and the launch's arguments).
const Region* check_access(BlockRun& b, int t, uintptr_t addr, size_t bytes, Access kind);

}  // namespace kiln::emul
