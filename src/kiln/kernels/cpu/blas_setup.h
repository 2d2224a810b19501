// OpenBLAS core selection. OpenBLAS picks its kernels from CPUID when it loads; 0.3.21 (Debian
// 12) does not know recent Intel server CPUs (Sapphire Rapids) and silently falls back to its
// generic "Prescott" SSE3 kernels, about 4x slower. OPENBLAS_CORETYPE is read only at load, so
// the CLI re-executes itself with it set when that fallback is detected.
#pragma once

#include <string>

namespace kiln {

// The OpenBLAS core in use ("SkylakeX", "Haswell", "Prescott", ...).
std::string blas_core_name();

// The OPENBLAS_CORETYPE to run with, or "" when OpenBLAS's own choice is fine (or the user set
// OPENBLAS_CORETYPE). Chosen from the CPU's features, never beyond what the CPU supports.
std::string blas_coretype_override();

// One line for logs: library, core and thread count.
std::string blas_info();

}  // namespace kiln
