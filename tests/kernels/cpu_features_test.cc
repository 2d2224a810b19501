// KILN_CPU_ISA caps the features kiln's own code chooses by (kernels/device/cpu_features.h).
#include "kiln/kernels/device/cpu_features.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kiln/base/error.h"
#include "kiln/kernels/device/host_cpu.h"

namespace kiln {
namespace {

TEST(CpuFeatures, NoCapIsTheCpusLevel) {
  for (const char* none : {static_cast<const char*>(nullptr), "", "native"}) {
    const CpuFeatures f = cpu_features_for(CpuIsa::kAmx, none);
    EXPECT_EQ(f.isa, CpuIsa::kAmx);
    EXPECT_FALSE(f.capped());
    EXPECT_TRUE(f.avx2() && f.avx512() && f.avx512_bf16());
  }
}

TEST(CpuFeatures, ACapBelowTheCpuTurnsItsFeaturesOff) {
  const CpuFeatures f = cpu_features_for(CpuIsa::kAmx, "avx2");
  EXPECT_EQ(f.isa, CpuIsa::kAvx2);
  EXPECT_EQ(f.cpu, CpuIsa::kAmx);
  EXPECT_TRUE(f.capped());
  EXPECT_TRUE(f.avx2());
  EXPECT_FALSE(f.avx512());
  EXPECT_FALSE(f.avx512_bf16());
  EXPECT_EQ(cpu_features_for(CpuIsa::kAvx512Bf16, "avx512").isa, CpuIsa::kAvx512);
  EXPECT_EQ(cpu_features_for(CpuIsa::kAvx2, "baseline").isa, CpuIsa::kBaseline);
}

TEST(CpuFeatures, ACapAboveTheCpuNeverAddsAFeature) {
  const CpuFeatures f = cpu_features_for(CpuIsa::kAvx2, "amx");
  EXPECT_EQ(f.isa, CpuIsa::kAvx2);
  EXPECT_FALSE(f.capped());
  EXPECT_FALSE(f.avx512_bf16());
}

TEST(CpuFeatures, AnUnknownLevelNamesTheVariableAndTheLevels) {
  try {
    cpu_features_for(CpuIsa::kAvx2, "avx1024");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("KILN_CPU_ISA='avx1024'"), std::string::npos) << what;
    EXPECT_NE(what.find("native, baseline, avx2, avx512, avx512_bf16, amx"), std::string::npos)
        << what;
  }
}

// This process's features follow KILN_CPU_ISA: the suite's avx2.* reruns set it to avx2, and then
// nothing of kiln's may take an AVX-512 path whatever the CPU has.
TEST(CpuFeatures, ThisProcessFollowsTheVariable) {
  const char* cap = std::getenv("KILN_CPU_ISA");
  if (cap == nullptr || std::string(cap) != "avx2") {
    GTEST_SKIP() << "runs under KILN_CPU_ISA=avx2 (the avx2.* rerun of this test)";
  }
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(f.isa, std::min(f.cpu, CpuIsa::kAvx2));
  EXPECT_FALSE(f.avx512());
  EXPECT_EQ(measure_bf16_peak_gflops(0.01), 0.0);
}

}  // namespace
}  // namespace kiln
