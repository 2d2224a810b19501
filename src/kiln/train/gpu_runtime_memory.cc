#include "kiln/train/gpu_runtime_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace kiln {

namespace {

double mib(size_t b) { return static_cast<double>(b) / 1048576.0; }

// A positive integer environment variable, or `fallback` where unset or not one (NCCL, too,
// warns and keeps its default for a value it cannot read). `from` says which.
size_t env_size(const EnvLookup& env, const char* name, size_t fallback, std::string& from) {
  const char* v = env(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 0);
  if (end == v || *end != '\0' || n <= 0) {
    from += fmt::format(", {}='{}' ignored as NCCL does", name, v);
    return fallback;
  }
  from += fmt::format(", {}={}", name, v);
  return static_cast<size_t>(n);
}

}  // namespace

// The context holds the driver's per-process state, the loaded kernels' code and each SM's local
// memory reservation. 512 MiB is the size nvidia-smi reports for a process that has created a
// context and loaded a few kernels with CUDA 12 or 13 and lazy module loading (the default on
// Linux since CUDA 12.2), on Ampere and Hopper GPUs (about 300 to 600 MiB by GPU and driver).
// kiln has not measured it on a GPU yet; a CUDA_MODULE_LOADING=EAGER process loads every kernel
// of kiln and cuBLAS at start and holds more.
RuntimeMemoryPart cuda_context_memory(const EnvLookup& env) {
  constexpr size_t kContextBytes = size_t{512} << 20;
  std::string source =
      "CUDA 12/13 context with lazy module loading as nvidia-smi reports it on Ampere and Hopper "
      "(300-600 MiB), not measured by kiln";
  const char* loading = env("CUDA_MODULE_LOADING");
  if (loading != nullptr && std::strcmp(loading, "EAGER") == 0) {
    source += "; CUDA_MODULE_LOADING=EAGER loads every kernel at start: expect more";
  }
  return {kContextBytes, source};
}

// NCCL (src/init.cc, 2.28) gives each connection one buffer per protocol: Simple NCCL_BUFFSIZE
// (DEFAULT_BUFFSIZE, 4 MiB), LL NCCL_LL_BUFFSIZE (8 lines x 512 threads x 8 steps x 16 B =
// 512 KiB) and LL128 NCCL_LL128_BUFFSIZE (120 elements x 640 threads x 8 steps x 8 B =
// 4800 KiB). A ring channel connects a rank to its previous and next rank (one peer when the
// group has two ranks). How many channels NCCL opens depends on the topology it finds (2 to 4
// over PCIe, 32 on NVSwitch systems such as DGX H100, as NCCL_DEBUG=INFO's "coll channels"
// says); the plan takes 32, or NCCL_MAX_NCHANNELS where set, so it errs on the large side.
RuntimeMemoryPart nccl_buffer_memory(const std::vector<int>& group_sizes, const EnvLookup& env) {
  std::string from;
  const size_t simple = env_size(env, "NCCL_BUFFSIZE", size_t{4} << 20, from);
  const size_t ll = env_size(env, "NCCL_LL_BUFFSIZE", size_t{8} * 512 * 8 * 16, from);
  const size_t ll128 = env_size(env, "NCCL_LL128_BUFFSIZE", size_t{120} * 640 * 8 * 8, from);
  const size_t channels = env_size(env, "NCCL_MAX_NCHANNELS", 32, from);
  size_t peers = 0;
  for (int n : group_sizes) peers += static_cast<size_t>(std::clamp(n - 1, 0, 2));
  const size_t per_connection = simple + ll + ll128;
  RuntimeMemoryPart p;
  p.bytes = channels * peers * per_connection;
  p.source = fmt::format(
      "{} channels x {} ring peer(s) x {:.2f} MiB per connection (Simple {:.2f} + LL {:.2f} + "
      "LL128 {:.2f} MiB; NCCL 2.28's defaults where not set{})",
      channels, peers, mib(per_connection), mib(simple), mib(ll), mib(ll128), from);
  return p;
}

}  // namespace kiln
