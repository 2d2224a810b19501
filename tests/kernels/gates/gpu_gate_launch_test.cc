// Gate: every kernel launch of a training step of the largest preset at 64k tokens fits the
// hardware (grid x < 2^31, y and z < 65536, at most 1024 threads, dynamic shared memory within
// what the kernel asked cudaFuncSetAttribute for and what sm_80 to sm_90 offer), and every scratch
// allocation has a sane size. The launches are the CUDA backend's own (its launchers run on the
// dry-run backend under the emulator's DryRun, which checks each launch as a real one is checked);
// the step is the model's own code. Needs no GPU and no CUDA toolkit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "kernels/emul/dry_run_backend.h"
#include "kernels/emul/emulator.h"
#include "kernels/gates/model_step.h"
#include "kiln/base/error.h"

namespace kiln::gates {
namespace {

constexpr size_t kDeviceBytes = size_t{141} << 30;  // an H200: no allocation may be larger
constexpr int kTokens = 64 << 10;

struct Step {
  std::vector<emul::LaunchRecord> launches;
  std::vector<size_t> scratch;  // the backend's and its kernels' own buffers
  std::string fault;
};

Step dry_step(const std::string& preset, ComputeDType dtype, bool recompute) {
  const ModelConfig c = preset_config(preset);
  const int T = static_cast<int>(std::min<int64_t>(c.max_position_embeddings, kTokens));
  emul::DryRun dry;
  emul::DryRunCudaBackend be(dtype);
  run_step(c, be, kTokens / T, T, 4096, recompute, 8);
  std::vector<size_t> scratch = dry.allocations();
  scratch.insert(scratch.end(), be.scratch().begin(), be.scratch().end());
  return {dry.launches(), scratch, emul::take_fault()};
}

void expect_within_limits(const std::string& what, const Step& s) {
  EXPECT_TRUE(s.fault.empty()) << what << ": " << s.fault;
  ASSERT_FALSE(s.launches.empty()) << what;
  dim3 most{0, 0, 0};
  for (const emul::LaunchRecord& l : s.launches) {
    EXPECT_LT(l.grid.x, 1u << 31) << what << " " << l.kernel;
    EXPECT_LT(l.grid.y, 65536u) << what << " " << l.kernel;
    EXPECT_LT(l.grid.z, 65536u) << what << " " << l.kernel;
    EXPECT_LE(l.block.x * l.block.y * l.block.z, 1024u) << what << " " << l.kernel;
    most = {std::max(most.x, l.grid.x), std::max(most.y, l.grid.y), std::max(most.z, l.grid.z)};
  }
  size_t largest = 0;
  for (const size_t bytes : s.scratch) {
    EXPECT_GT(bytes, 0u) << what;
    EXPECT_LE(bytes, kDeviceBytes) << what << ": an allocation of " << bytes << " bytes";
    largest = std::max(largest, bytes);
  }
  std::printf(
      "[ gate     ] %s: %zu launches, largest grid (%u, %u, %u), %zu scratch buffers, "
      "largest %.2f GiB\n",
      what.c_str(), s.launches.size(), most.x, most.y, most.z, s.scratch.size(),
      static_cast<double>(largest) / (1 << 30));
}

TEST(GpuGateLaunch, LargestPresetAt64kTokensBf16) {
  const std::string p = largest_preset();
  expect_within_limits(p + " bf16", dry_step(p, ComputeDType::kBf16, false));
}

TEST(GpuGateLaunch, LargestPresetAt64kTokensBf16Recomputed) {
  const std::string p = largest_preset();
  expect_within_limits(p + " bf16 recompute", dry_step(p, ComputeDType::kBf16, true));
}

TEST(GpuGateLaunch, LargestPresetAt64kTokensFp32) {
  const std::string p = largest_preset();
  expect_within_limits(p + " fp32", dry_step(p, ComputeDType::kFp32, false));
}

// The gate can fail: a launch beyond the grid's y limit is a fault of the dry run as of a run.
TEST(GpuGateLaunch, AnOversizedGridIsCaught) {
  emul::DryRun dry;
  emul::DryRunCudaBackend be(ComputeDType::kFp32);
  // rmsnorm_backward's dw pass has a grid of (rows / 64, columns / 32): columns past 2^21 exceed
  // the 65535 limit of y. A dw to write (the dry run's address space): without one (a frozen
  // weight) there is no dw pass.
  const int N = 64, C = 65536 * 32 + 32;
  float* none = nullptr;
  void* dw = be.alloc(sizeof(float) * C);
  EXPECT_THROW(be.rmsnorm_backward(none, static_cast<float*>(dw), none, none,
                                   static_cast<const float*>(none), none, N, C, false),
               Error);
  be.free(dw);
  const std::string f = emul::take_fault();
  EXPECT_NE(f.find("beyond (2^31 - 1, 65535, 65535)"), std::string::npos) << f;
}

}  // namespace
}  // namespace kiln::gates
