// Device memory a GPU rank holds that kiln never allocates: the CUDA context and NCCL's
// connection buffers. The memory plan runs kiln's code on a counting backend (memory_plan.h),
// which sees kiln's allocations only, so these two are figures from their makers' sources, each
// given with where it comes from; the plan adds them per device (one rank per GPU).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace kiln {

struct RuntimeMemoryPart {
  size_t bytes = 0;
  std::string source;  // where the figure comes from, one line
};

// The environment, read by name (std::getenv, or a map in tests): nullptr where unset.
using EnvLookup = std::function<const char*(const char*)>;

// The CUDA context of one process on one device.
RuntimeMemoryPart cuda_context_memory(const EnvLookup& env);

// NCCL's buffers for communicators of these sizes (the groups a rank runs collectives on: the
// world, and under hybrid_shard its node's and its cross-node group); groups of one rank hold
// none. NCCL_BUFFSIZE, NCCL_LL_BUFFSIZE, NCCL_LL128_BUFFSIZE and NCCL_MAX_NCHANNELS are read
// from `env` where set.
RuntimeMemoryPart nccl_buffer_memory(const std::vector<int>& group_sizes, const EnvLookup& env);

}  // namespace kiln
