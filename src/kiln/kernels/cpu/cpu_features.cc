#include "kiln/kernels/device/cpu_features.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <utility>

#include "kiln/base/error.h"

namespace kiln {

namespace {

constexpr std::array<std::pair<CpuIsa, std::string_view>, 5> kIsaNames = {{
    {CpuIsa::kBaseline, "baseline"},
    {CpuIsa::kAvx2, "avx2"},
    {CpuIsa::kAvx512, "avx512"},
    {CpuIsa::kAvx512Bf16, "avx512_bf16"},
    {CpuIsa::kAmx, "amx"},
}};

// The highest level whose every feature the CPU reports (CPUID through the compiler's builtins).
CpuIsa detect_cpu_isa() {
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return CpuIsa::kBaseline;
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))) {
    return CpuIsa::kAvx2;
  }
  if (!__builtin_cpu_supports("avx512bf16")) return CpuIsa::kAvx512;
  if (!__builtin_cpu_supports("amx-bf16")) return CpuIsa::kAvx512Bf16;
  return CpuIsa::kAmx;
}

std::string allowed_values() {
  std::string all = "native";
  for (const auto& [isa, name] : kIsaNames) all += ", " + std::string(name);
  return all;
}

}  // namespace

std::string_view cpu_isa_name(CpuIsa isa) {
  for (const auto& [i, name] : kIsaNames) {
    if (i == isa) return name;
  }
  return "?";
}

CpuFeatures cpu_features_for(CpuIsa cpu, const char* cap_text) {
  CpuFeatures f;
  f.cpu = cpu;
  f.isa = cpu;
  const std::string_view cap = cap_text == nullptr ? "" : cap_text;
  if (cap.empty() || cap == "native") return f;
  const auto it = std::find_if(kIsaNames.begin(), kIsaNames.end(),
                               [&](const auto& entry) { return entry.second == cap; });
  if (it == kIsaNames.end()) {
    fail("KILN_CPU_ISA='{}' is not an ISA level (one of {})", cap, allowed_values());
  }
  f.isa = std::min(cpu, it->first);
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features =
      cpu_features_for(detect_cpu_isa(), std::getenv("KILN_CPU_ISA"));
  return features;
}

}  // namespace kiln
