#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "kiln/kernels/device/cpu_features.h"
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
  const CpuFeatures& f = cpu_features();
  // A generic fallback is overridden, and an AVX-512 core under a cap below AVX-512; any other
  // core OpenBLAS recognised is kept.
  const bool generic =
      core == "Prescott" || core == "Core2" || core == "Nehalem" || core == "Sandybridge";
  const bool avx512_core = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
  if (!generic && !(avx512_core && !f.avx512())) return "";
  if (f.avx512()) return "SkylakeX";
  if (f.avx2()) return "Haswell";
  return avx512_core ? "Sandybridge" : "";
}

std::string blas_info() {
  return fmt::format("OpenBLAS ({}), core {}, {} threads", openblas_get_config(), blas_core_name(),
                     omp_get_max_threads());
}

}  // namespace kiln
