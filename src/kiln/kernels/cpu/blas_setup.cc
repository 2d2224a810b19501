#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "kiln/kernels/device/host_cpu.h"

namespace kiln {

int usable_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int worker_threads(int requested, int local_workers) {
  if (requested > 0) return requested;
  return std::max(1, usable_cpu_count() / std::max(1, local_workers));
}

std::string blas_core_name() {
  const char* n = openblas_get_corename();
  return n ? n : "unknown";
}

std::string blas_coretype_override() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";
  const std::string core = blas_core_name();
  // Only a generic fallback is overridden; a core OpenBLAS recognised is kept.
  if (core != "Prescott" && core != "Core2" && core != "Nehalem" && core != "Sandybridge") {
    return "";
  }
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

std::string blas_info() {
  return fmt::format("OpenBLAS ({}), core {}, {} threads", openblas_get_config(), blas_core_name(),
                     omp_get_max_threads());
}

}  // namespace kiln
