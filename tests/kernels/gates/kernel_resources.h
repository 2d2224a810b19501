// What ptxas made of each kernel, per architecture, and the rules a launch of it must keep on
// that architecture: read from `ptxas -v` over the PTX of each kernel source (the build writes
// both: tests/kernels/gates/CMakeLists.txt), checked against the launches the CUDA backend makes
// (the census: the emulator's dry run of the model's step).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace kiln::gates {

struct KernelResources {
  int sm = 0;                // 80, 89, 90
  std::string name;          // short kernel name ("flash_dkdv_kernel<128>")
  int registers = 0;         // per thread
  size_t static_shared = 0;  // bytes of __shared__ variables
  int max_threads = 0;       // __launch_bounds__ (.maxntid), 0 when none
};

// The `ptxas -v` report of one PTX file (entries "Compiling entry function '<mangled>' for
// 'sm_NN'" and their "Used N registers, ... M bytes smem") with the .maxntid of each .entry of
// the PTX.
std::vector<KernelResources> parse_ptxas(const std::string& report, const std::string& ptx);

// The launches of each kernel: the most threads a block has, and the most dynamic shared memory,
// by short name.
struct Census {
  std::map<std::string, int> threads;
  std::map<std::string, size_t> dynamic_shared;
};

struct ArchLimits {
  int sm;
  int threads_per_sm;
  int blocks_per_sm;
  size_t shared_per_sm;     // usable by blocks, each also taking kReservedShared
  size_t shared_per_block;  // the opt-in maximum (cudaFuncSetAttribute)
};
inline constexpr int kRegistersPerSm = 65536;  // also the most one block may hold
inline constexpr size_t kReservedShared = 1024;
// sm_80 (A100), sm_89 (L4, L40), sm_90 (H100, H200).
const ArchLimits& arch_limits(int sm);

// Blocks of `k` one SM holds when launched with `threads` threads and `dynamic` bytes.
int blocks_per_sm(const KernelResources& k, int threads, size_t dynamic, const ArchLimits& a);

// A flash kernel allowed fewer than two blocks per SM on one architecture, and why.
struct OccupancyException {
  std::string name;
  int sm;
  int blocks;
};

// Broken rules, one line each:
//   every kernel ptxas compiled is launched in the census (by short name, or by its name without
//     template arguments for the block size)
//   registers x threads within the 64K registers of a block (allocated 256 per warp)
//   a kernel launched with 1024 threads has __launch_bounds__, and no kernel is launched with
//     more threads than its bounds
//   static + dynamic shared memory within the block's opt-in maximum
//   flash kernels: at least two blocks per SM, but for `exceptions` (at the blocks they give,
//     and only while they need one)
std::vector<std::string> check_kernels(const std::vector<KernelResources>& kernels,
                                       const Census& census,
                                       const std::vector<OccupancyException>& exceptions);

}  // namespace kiln::gates
