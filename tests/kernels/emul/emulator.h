// The CPU emulator of kiln's CUDA kernels, as its tests see it. The kernel sources
// (src/kiln/kernels/cuda/*.cu) are compiled by clang against the emulator's CUDA headers (shim/)
// into kiln_emul_kernels, in namespace kiln::emul_cuda (so they link beside the real CUDA
// backend); their host launchers are called as the CUDA backend calls them, and each launch runs
// there and then:
//   - a block's threads are fibers on one OS thread, each run until it reaches __syncthreads, a
//     warp operation (shuffle, vote, ldmatrix, mma.sync) or its end; blocks run one after another
//   - warp operations exchange values between the lanes that reach them; ldmatrix and mma follow
//     the PTX ISA's fragment layouts (tensor_core.h)
//   - every load and store of kernel code is checked (the kernel sources are instrumented by the
//     compiler's kernel-address sanitizer, whose callbacks are the emulator's): it must lie in a
//     device buffer, a __shared__ variable, the launch's dynamic shared memory or the thread's
//     own stack, aligned to its size; shared and device memory accesses are tracked per byte for
//     races (another thread's access in the same barrier phase, or any other block's, with at
//     least one write), and shared memory reads of bytes not written since the block started
//   - a __syncthreads that not every thread reaches, threads exiting while others wait, a warp
//     operation some lane of its mask cannot reach, and launches outside the limits of sm_80 to
//     sm_90 are faults
// A fault stops the launch, is sticky (cudaGetLastError reports it, KILN_CUDA_CHECK throws it)
// and is taken by the test with take_fault().
//
// What it does not show: anything about timing or the order in which a GPU would interleave
// threads beyond the race rules (memory is sequentially consistent here, __syncwarp orders
// nothing for race tracking), bank conflicts and occupancy (the ptxas gate reads those), and
// floating-point differences of the GPU's fast intrinsics (__expf is expf here). A device-memory
// write after reads by two other blocks can be missed (access_check.h). cuBLASLt is not emulated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/emul/runtime_api.h"

namespace kiln::emul {

// Totals since the process started.
struct Stats {
  uint64_t launches = 0, blocks = 0, threads = 0;
  uint64_t barriers = 0;  // completed __syncthreads
  uint64_t warp_ops = 0;  // completed warp operations
  uint64_t accesses = 0;  // checked loads and stores of device and shared memory
};
Stats stats();

// The first fault since the last call (with how many more there were), or "" when none; clears
// it, so later launches run again.
std::string take_fault();

// Device memory for tests: registered like cudaMalloc's (bounds checked), named in messages.
void* device_alloc(size_t bytes, const std::string& name);
void device_free(void* p);

// A launch as the kernel source made it: the kernel (its expression in the source, template
// arguments as written), grid, block and dynamic shared memory.
struct LaunchRecord {
  std::string kernel;
  dim3 grid, block;
  size_t dynamic_shared = 0;
};

// While a DryRun lives (one at a time), launches are checked against the hardware's limits (a
// violation is a fault, as in a real run) and recorded instead of run, and device memory is
// address space only: allocations (recorded) hand out addresses nothing may touch, copies and
// fills to device memory do nothing, copies to the host write zeros. For host-side gates over
// shapes far beyond what the emulator could run (the largest model at 64k tokens).
class DryRun {
 public:
  DryRun();
  ~DryRun();
  DryRun(const DryRun&) = delete;
  DryRun& operator=(const DryRun&) = delete;
  const std::vector<LaunchRecord>& launches() const;
  // Bytes of each allocation the kernel sources made (cudaMalloc, cudaMallocAsync: scratch).
  const std::vector<size_t>& allocations() const;
};

}  // namespace kiln::emul
