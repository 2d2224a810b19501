// The CPU features kiln's own code chooses by, decided in one place: what the CPU reports, capped
// by KILN_CPU_ISA. Every feature decision of kiln (bf16 products or their fp32 fallback, the
// conversions' vector paths, the peak loops, OpenBLAS's core when the CLI re-executes, oneDNN's
// ISA) reads cpu_features(), so one variable makes an AVX-512 or AMX machine behave as an
// AVX2-only one (the suite's `avx2.*` reruns and scripts/test_avx2.sh set it) without a second
// machine. Code compiled for the machine (-march) is not affected: that is KILN_MARCH's job.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// ISA levels, each including the ones below it.
enum class CpuIsa {
  kBaseline,    // SSE only: no vector path of kiln's own
  kAvx2,        // AVX2 + FMA (x86-64-v3)
  kAvx512,      // AVX-512 F, BW, VL, DQ
  kAvx512Bf16,  // + AVX512_BF16: native bf16 products
  kAmx,         // + AMX-BF16
};

struct CpuFeatures {
  CpuIsa isa = CpuIsa::kBaseline;  // the level kiln uses: the CPU's, capped by KILN_CPU_ISA
  CpuIsa cpu = CpuIsa::kBaseline;  // the level the CPU reports
  bool capped() const { return isa < cpu; }
  bool avx2() const { return isa >= CpuIsa::kAvx2; }
  bool avx512() const { return isa >= CpuIsa::kAvx512; }
  bool avx512_bf16() const { return isa >= CpuIsa::kAvx512Bf16; }
};

// "baseline", "avx2", "avx512", "avx512_bf16", "amx": KILN_CPU_ISA's values ("native": no cap).
std::string_view cpu_isa_name(CpuIsa isa);

// The features for a CPU at level `cpu` under the cap `cap_text` (KILN_CPU_ISA's value; null or
// empty or "native" for none). A cap above the CPU is no cap: kiln never uses what the CPU lacks.
// An unknown value is an error naming the variable and the allowed values.
CpuFeatures cpu_features_for(CpuIsa cpu, const char* cap_text);

// This machine's, read once per process (the CPU's CPUID and KILN_CPU_ISA).
const CpuFeatures& cpu_features();

}  // namespace kiln
