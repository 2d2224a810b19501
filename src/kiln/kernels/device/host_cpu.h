// Facts about the host CPU that sit beside the backends: which OpenBLAS core runs (and the
// OPENBLAS_CORETYPE the CLI re-executes with when OpenBLAS misdetects the CPU), and the
// machine's measured arithmetic peak. OpenBLAS picks its kernels from CPUID when it loads; 0.3.21
// (Debian 12) does not know recent Intel server CPUs (Sapphire Rapids) and silently falls back
// to its generic "Prescott" SSE3 kernels, about 4x slower. OPENBLAS_CORETYPE is read only at
// load, hence the re-exec. The peak is an FMA loop of kiln's own on every OpenMP thread, the
// denominator of the "fraction of peak" that `kiln bench train` prints.
#pragma once

#include <string>

namespace kiln {

// The CPUs this process may run on (its affinity mask: a container's cpuset, taskset), at least 1.
int usable_cpu_count();

// The OpenMP threads a worker runs with: `requested` when positive (dist.threads_per_worker),
// else this machine's usable CPUs shared by its `local_workers`. The agent gives each worker
// this many; the memory plan sizes the CPU kernels' per-thread scratch with it.
int worker_threads(int requested, int local_workers);

// The OpenBLAS core in use ("SkylakeX", "Haswell", "Prescott", ...).
std::string blas_core_name();

// The OPENBLAS_CORETYPE to run with, or "" when OpenBLAS's own choice is fine (or the user set
// OPENBLAS_CORETYPE): a generic fallback is replaced by the kernels of kiln's ISA, and an AVX-512
// core by Haswell's when KILN_CPU_ISA caps kiln below AVX-512 (cpu_features.h). Never beyond what
// the CPU supports.
std::string blas_coretype_override();

// One line for logs: library, core and thread count.
std::string blas_info();

// fp32 FMA throughput of all threads (AVX-512 vfmadd231ps when the CPU has AVX-512F, else AVX2
// FMA), GFLOP/s counting a multiply-add as 2. Runs for about `seconds`.
double measure_fp32_peak_gflops(double seconds = 0.25);
// bf16 dot-product throughput (vdpbf16ps: 32 bf16 multiply-adds into fp32 per instruction) of all
// threads, GFLOP/s; 0 without AVX512_BF16 (cpu_features.h: the CPU's, capped by KILN_CPU_ISA).
double measure_bf16_peak_gflops(double seconds = 0.25);

}  // namespace kiln
