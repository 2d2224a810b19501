// The emulated device: what the CUDA runtime keeps per process (memory, the sticky error, function
// attributes) and what the emulator keeps across launches (fibers, epochs, totals). Process-wide,
// as a CUDA context is: the kernel sources reach it through free functions (cudaMalloc, launches,
// the instrumentation's callbacks) that take no context. One launch at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/emul/emulator.h"
#include "kernels/emul/fiber.h"
#include "kernels/emul/memory_map.h"
#include "kernels/emul/runtime_api.h"

namespace kiln::emul {

inline constexpr size_t kFiberStackBytes = size_t{256} << 10;
// The limits a launch must keep (the strictest of sm_80, sm_89 and sm_90).
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr size_t kDefaultDynamicSharedBytes = size_t{48} << 10;  // without the attribute
inline constexpr size_t kMaxDynamicSharedBytes = size_t{99} << 10;      // sm_89's opt-in limit

class Device {
 public:
  static Device& get();

  MemoryMap& memory() { return memory_; }
  Stats& stats() { return stats_; }
  std::mutex& launch_mutex() { return launch_mu_; }

  // Epochs order accesses (access_check.h): one is taken at every block start and every
  // completed barrier, so two accesses of one block share an epoch iff no barrier lies between.
  uint32_t new_epoch() { return ++epoch_; }

  // The first fault is kept (later ones counted) until taken; while one is held, launches are
  // skipped and cudaGetLastError reports cudaErrorLaunchFailure.
  void fault(std::string what);
  bool faulted() const { return !fault_.empty(); }
  std::string take_fault();
  const std::string& fault_text() const { return fault_; }
  // A failed API call (not sticky): reported once by cudaGetLastError.
  void api_error(cudaError_t e, std::string what);
  cudaError_t last_error(bool clear);

  void set_max_dynamic_shared(const void* kernel, int bytes) { max_dynamic_[kernel] = bytes; }
  size_t max_dynamic_shared(const void* kernel) const;

  // Dry runs (emulator.h's DryRun): fake device addresses, records instead of launches.
  bool dry_run() const { return dry_run_; }
  void set_dry_run(bool on);
  // An address range of `bytes`; `record`: a scratch allocation of the kernel sources.
  void* fake_alloc(size_t bytes, bool record);
  bool is_fake(const void* p) const;
  std::vector<LaunchRecord>& launch_records() { return launches_; }
  std::vector<size_t>& allocation_records() { return allocations_; }

  // Fibers for the threads of a block, kept between launches.
  Fiber& fiber(int i);
  // A launch's dynamic shared memory (kMaxDynamicSharedBytes, 16-byte aligned).
  unsigned char* dynamic_shared() { return dynamic_shared_.get(); }

 private:
  Device();
  MemoryMap memory_;
  Stats stats_;
  std::mutex launch_mu_;
  uint32_t epoch_ = 0;
  std::string fault_;
  int more_faults_ = 0;
  cudaError_t api_error_ = cudaSuccess;
  std::unordered_map<const void*, int> max_dynamic_;
  std::vector<std::unique_ptr<Fiber>> fibers_;
  bool dry_run_ = false;
  uintptr_t next_fake_ = 0;
  std::vector<LaunchRecord> launches_;
  std::vector<size_t> allocations_;
  struct FreeAligned {
    void operator()(unsigned char* p) const;
  };
  std::unique_ptr<unsigned char, FreeAligned> dynamic_shared_;
};

}  // namespace kiln::emul
