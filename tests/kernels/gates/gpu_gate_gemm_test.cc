// Gate: every GEMM the CUDA backend hands cuBLASLt in a training step of every preset (each
// family the model supports: the preset list, so presets added later are checked too), in fp32
// and bf16, has its three leading dimensions and its operands' addresses (A, B, C and the bias) on
// 16-byte boundaries, where cuBLASLt's heuristic is sure to find an algorithm. The GEMMs are the
// ones cuda_matmul.cc and cross_entropy.cc build (linear_gemms.h, cross_entropy_plan.h), with the
// model's own buffers, on the dry-run backend (kernels/emul/dry_run_backend.h). A GEMM below 16
// bytes would need LtGemm's low-alignment fallback on the GPU. Needs no GPU and no CUDA toolkit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/emul/dry_run_backend.h"
#include "kernels/emul/emulator.h"
#include "kernels/gates/model_step.h"

namespace kiln::gates {
namespace {

constexpr int kAlign = 16;

// "matmul_forward GEMM ...: ldb 1800 bytes" for each operand of g off 16 bytes.
std::vector<std::string> misaligned(const emul::GemmRecord& g) {
  const emul_cuda::GemmSpec& s = g.spec;
  const int64_t in = s.inputs == DType::BF16 ? 2 : 4;
  std::vector<std::string> bad;
  const auto check = [&](const char* what, int64_t bytes) {
    if (bytes % kAlign != 0)
      bad.push_back(fmt::format("{} {}: {} {} bytes", g.op, describe(s), what, bytes));
  };
  check("lda", s.lda * in);
  check("ldb", s.ldb * in);
  check("ldc", s.ldc * 4);
  const auto addr = [](const void* p) {
    return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p));
  };
  check("A at", addr(g.a) % 256);
  check("B at", addr(g.b) % 256);
  check("C at", addr(g.c) % 256);
  if (g.bias != nullptr) check("bias at", addr(g.bias) % 256);
  return bad;
}

struct GemmStep {
  std::vector<emul::GemmRecord> gemms;
  std::string fault;
};

// A training step of B rows of T tokens.
GemmStep step_gemms(const ModelConfig& c, ComputeDType dtype, int B, int T) {
  emul::DryRun dry;
  emul::DryRunCudaBackend be(dtype);
  run_step(c, be, B, T, 300, false, 1);
  return {be.gemms(), emul::take_fault()};
}

// The misaligned GEMMs of every step of `c` (odd and even token counts, fp32 and bf16).
std::vector<std::string> misaligned_gemms(const ModelConfig& c, size_t* count) {
  std::vector<std::string> bad;
  for (const ComputeDType dtype : {ComputeDType::kFp32, ComputeDType::kBf16}) {
    for (const auto& [B, T] : {std::pair{1, 512}, std::pair{3, 333}}) {
      const GemmStep s = step_gemms(c, dtype, B, T);
      EXPECT_TRUE(s.fault.empty()) << s.fault;
      *count += s.gemms.size();
      for (const emul::GemmRecord& g : s.gemms) {
        for (std::string& b : misaligned(g)) bad.push_back(std::move(b));
      }
    }
  }
  return bad;
}

TEST(GpuGateGemm, EveryPresetAlignedTo16Bytes) {
  for (const std::string& name : preset_names()) {
    size_t count = 0;
    const std::vector<std::string> bad = misaligned_gemms(preset_config(name), &count);
    std::printf("[ gate     ] %s: %zu GEMMs, %zu off 16 bytes\n", name.c_str(), count, bad.size());
    EXPECT_GT(count, 0u) << name;
    for (size_t i = 0; i < bad.size() && i < 5; ++i) ADD_FAILURE() << name << ": " << bad[i];
  }
}

// The gate can fail: a model whose hidden size is not a multiple of 8 has bf16 leading
// dimensions off 16 bytes.
TEST(GpuGateGemm, AnOddHiddenSizeIsCaught) {
  ModelConfig c = preset_config("tiny");
  c.hidden_size = 100;
  c.num_attention_heads = 5;  // head_dim 20
  c.num_key_value_heads = 1;
  size_t count = 0;
  const std::vector<std::string> bad = misaligned_gemms(c, &count);
  EXPECT_GT(count, 0u);
  ASSERT_FALSE(bad.empty());
  std::printf("[ gate     ] caught: %s\n", bad.front().c_str());
}

}  // namespace
}  // namespace kiln::gates
