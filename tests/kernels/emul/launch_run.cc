// One emulated launch: the checks a launch must pass on sm_80 to sm_90, then every block in turn.
#include <fmt/format.h>

#include <cstring>
#include <mutex>

#include "kernels/emul/block_run.h"
#include "kernels/emul/device_state.h"
#include "kernels/emul/launch.h"

namespace kiln::emul {

namespace {

// Why the hardware would refuse this launch, or "".
std::string launch_error(const LaunchSpec& s, size_t max_dynamic) {
  const unsigned long long threads = 1ull * s.block.x * s.block.y * s.block.z;
  if (s.grid.x == 0 || s.grid.y == 0 || s.grid.z == 0) {
    return fmt::format("empty grid ({},{},{})", s.grid.x, s.grid.y, s.grid.z);
  }
  if (s.grid.x > 0x7fffffffu || s.grid.y > 65535 || s.grid.z > 65535) {
    return fmt::format("grid ({},{},{}) beyond (2^31 - 1, 65535, 65535)", s.grid.x, s.grid.y,
                       s.grid.z);
  }
  if (threads == 0 || threads > kMaxThreadsPerBlock || s.block.x > 1024 || s.block.y > 1024 ||
      s.block.z > 64) {
    return fmt::format("block ({},{},{}) beyond 1024 threads", s.block.x, s.block.y, s.block.z);
  }
  if (s.dynamic_shared > max_dynamic) {
    return fmt::format("{} bytes of dynamic shared memory, {} allowed{}", s.dynamic_shared,
                       max_dynamic,
                       max_dynamic == kDefaultDynamicSharedBytes
                           ? " (more needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize))"
                           : "");
  }
  return {};
}

}  // namespace

void run_launch(const LaunchSpec& s, void (*body)(void*), void* arg, const void* params_begin,
                const void* params_end) {
  Device& d = Device::get();
  std::lock_guard lock(d.launch_mutex());
  if (d.faulted()) return;  // a faulted device runs nothing until the fault is taken
  const std::string bad = launch_error(s, d.max_dynamic_shared(s.kernel));
  if (!bad.empty()) {
    d.api_error(cudaErrorInvalidConfiguration, fmt::format("launch of {}: {}", s.name, bad));
    return;
  }
  if (d.dry_run()) {
    d.launch_records().push_back({s.name, s.grid, s.block, s.dynamic_shared});
    return;
  }
  const uint64_t total =
      uint64_t{s.grid.x} * s.grid.y * s.grid.z * s.block.x * s.block.y * s.block.z;
  if (total >= (uint64_t{1} << 31)) {  // launch-wide thread ids are 31 bits (access_check.h)
    d.api_error(cudaErrorInvalidConfiguration,
                fmt::format("launch of {}: {} threads, too many to emulate", s.name, total));
    return;
  }
  LaunchRun run{};
  run.name = s.name;
  run.grid = s.grid;
  run.block = s.block;
  run.dynamic_shared = s.dynamic_shared;
  run.threads = static_cast<int>(s.block.x * s.block.y * s.block.z);
  run.body = body;
  run.body_arg = arg;
  run.params_begin = reinterpret_cast<uintptr_t>(params_begin);
  run.params_end = reinterpret_cast<uintptr_t>(params_end);
  if (s.dynamic_shared > 0) {
    run.shared_arena =
        &d.memory().add(RegionKind::kDynamicShared, d.dynamic_shared(), s.dynamic_shared,
                        kMaxDynamicSharedBytes - s.dynamic_shared, "'extern __shared__'");
  }
  run.first_epoch = d.new_epoch();
  ++d.stats().launches;
  uint32_t linear = 0;
  for (unsigned z = 0; z < s.grid.z && !d.faulted(); ++z) {
    for (unsigned y = 0; y < s.grid.y && !d.faulted(); ++y) {
      for (unsigned x = 0; x < s.grid.x && !d.faulted(); ++x, ++linear) {
        if (s.dynamic_shared > 0) std::memset(d.dynamic_shared(), 0xff, s.dynamic_shared);
        BlockRun block(run, {x, y, z}, linear);
        block.run();
        ++d.stats().blocks;
        d.stats().threads += static_cast<uint64_t>(run.threads);
      }
    }
  }
  if (run.shared_arena != nullptr) d.memory().remove(d.dynamic_shared());
}

}  // namespace kiln::emul
