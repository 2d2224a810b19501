// Gate: what ptxas made of every kernel for sm_80, sm_89 and sm_90 (the build's `ptxas -v` over
// each kernel source's PTX, KILN_PTXAS_DIR) fits the launches the CUDA backend makes (the census:
// the model's step of every preset, fp32 and bf16, on the emulator's dry run, plus the
// backend's other launch paths): registers x threads within a block's 64K, __launch_bounds__ on
// every kernel launched with 1024 threads, shared memory within each architecture's limit, at
// least two blocks per SM for the flash kernels (the exceptions below, with their figures).
// Dynamic shared memory above 48 KB without cudaFuncSetAttribute fails the census itself (the dry
// run checks each launch). Skips, saying so, without the CUDA toolkit.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/emul/dry_run_backend.h"
#include "kernels/emul/emulator.h"
#include "kernels/gates/kernel_resources.h"
#include "kernels/gates/model_step.h"
#include "kiln/kernels/device/device_buffer.h"

namespace kiln::gates {
namespace {

// The flash backward at head_dim 128 keeps 68 KiB (dQ: Q, dy, K, V tiles) and 51 KiB (dK/dV) of
// shared memory per block: one block per SM within the 100 KiB of sm_89 (L4, L40). sm_80 and
// sm_90, the training GPUs, hold two.
const std::vector<OccupancyException> kExceptions = {
    {"flash_dq_kernel<128>", 89, 1},
    {"flash_dkdv_kernel<128>", 89, 1},
};

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every report of the build: <source>.sm_<arch>.txt beside <source>.sm_<arch>.ptx.
std::vector<KernelResources> built_kernels(const std::string& dir) {
  std::vector<KernelResources> all;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".txt") continue;
    std::filesystem::path ptx = e.path();
    ptx.replace_extension(".ptx");
    for (KernelResources& k : parse_ptxas(read(e.path()), read(ptx))) all.push_back(std::move(k));
  }
  return all;
}

void add(Census& c, const std::vector<emul::LaunchRecord>& launches) {
  for (const emul::LaunchRecord& l : launches) {
    const int t = static_cast<int>(l.block.x * l.block.y * l.block.z);
    c.threads[l.kernel] = std::max(c.threads[l.kernel], t);
    c.dynamic_shared[l.kernel] = std::max(c.dynamic_shared[l.kernel], l.dynamic_shared);
  }
}

// The launch paths the model's step does not take: unaligned arrays (the scalar kernels), scale,
// the embedding lookup of a whole table, dropout (LoRA's) in every dtype pairing, a preference
// step's head.
void other_paths(const Backend& be) {
  DeviceBuffer<float> a(be, 1001), b(be, 1001), c(be, 1001), d(be, 1001);
  DeviceBuffer<int32_t> ids(be, 16);
  be.add(a.data() + 1, b.data() + 1, c.data() + 1, 1000);
  be.scale(a.data(), 2.0f, 1000);
  be.scale(a.data() + 1, 2.0f, 1000);
  be.adamw_step(a.data() + 1, b.data() + 1, c.data() + 1, d.data() + 1, 1000, {});
  be.embedding_forward(a.data(), ids.data(), b.data(), 16, 60);
  be.embedding_forward(a.data(), ids.data(), ConstDevPtr(b.data(), DType::BF16), 16, 60);
  for (const DType in : {DType::F32, DType::BF16}) {
    for (const DType out : {DType::F32, DType::BF16}) {
      be.dropout(DevPtr(a.data(), out), ConstDevPtr(b.data(), in), 1000, 0.1f, 1, 0);
    }
  }
  // A preference (DPO) step's head ops (model/preference_head.h): 4 sequences of 4 rows.
  DeviceBuffer<double> seq(be, 8), ref(be, 8), sums(be, kNumPreferenceSums);
  be.ce_part_row_loss(a.data(), b.data(), c.data(), ids.data(), 16);
  be.sequence_logps(seq.data(), a.data(), ids.data(), ids.data(), 4);
  be.preference_loss(a.data(), sums.data(), seq.data(), ref.data(), ids.data(), 4,
                     PreferenceTerms{}, 0, 2);
  be.scale_rows(b.data(), a.data(), 16, 60);
}

Census census(std::string* fault) {
  Census c;
  for (const ComputeDType dtype : {ComputeDType::kFp32, ComputeDType::kBf16}) {
    for (const std::string& name : preset_names()) {
      emul::DryRun dry;
      emul::DryRunCudaBackend be(dtype);
      run_step(preset_config(name), be, 1, 256, 100, false, 2);
      other_paths(be);
      add(c, dry.launches());
      *fault += emul::take_fault();
    }
  }
  return c;
}

TEST(GpuGatePtxas, ResourcesFitTheLaunches) {
  const std::string dir = KILN_PTXAS_DIR;
  if (dir.empty()) GTEST_SKIP() << "no CUDA toolkit in this build: no ptxas reports";
  const std::vector<KernelResources> kernels = built_kernels(dir);
  ASSERT_FALSE(kernels.empty()) << "no ptxas reports in " << dir;
  std::string fault;
  const Census c = census(&fault);
  EXPECT_TRUE(fault.empty()) << fault;
  for (const KernelResources& k : kernels) {
    if (k.name.rfind("flash_", 0) != 0) continue;
    const int threads = c.threads.count(k.name) ? c.threads.at(k.name) : 0;
    const size_t dyn = c.dynamic_shared.count(k.name) ? c.dynamic_shared.at(k.name) : 0;
    std::printf("[ gate     ] %-24s sm_%d: %3d registers, %5zu + %6zu bytes shared, %d blocks/SM\n",
                k.name.c_str(), k.sm, k.registers, k.static_shared, dyn,
                threads > 0 ? blocks_per_sm(k, threads, dyn, arch_limits(k.sm)) : 0);
  }
  std::printf("[ gate     ] %zu kernel entries over %zu launched kernels\n", kernels.size(),
              c.threads.size());
  for (const std::string& b : check_kernels(kernels, c, kExceptions)) ADD_FAILURE() << b;
}

// The rules can fail: planted kernels breaking each of them.
TEST(GpuGatePtxas, PlantedViolationsAreFound) {
  Census c;
  c.threads = {{"wide_kernel", 1024}, {"flash_planted<64>", 128}, {"bounded_kernel", 512}};
  c.dynamic_shared = {{"flash_planted<64>", 120 << 10}};
  const std::vector<KernelResources> kernels = {
      {90, "wide_kernel", 80, 0, 0},          // 80 x 1024 registers, no __launch_bounds__
      {90, "flash_planted<64>", 96, 0, 128},  // 120 KiB: one block per SM
      {90, "bounded_kernel", 32, 0, 256},     // launched beyond its bounds
      {90, "orphan_kernel", 32, 0, 0},        // never launched
      {89, "flash_planted<64>", 96, 0, 128},  // beyond sm_89's 99 KiB per block
  };
  const std::vector<std::string> bad = check_kernels(kernels, c, {});
  const auto found = [&](const std::string& what) {
    for (const std::string& b : bad) {
      if (b.find(what) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(found("wide_kernel (sm_90): 80 registers x 1024 threads"));
  EXPECT_TRUE(found("wide_kernel (sm_90): launched with 1024 threads without __launch_bounds__"));
  EXPECT_TRUE(found("flash_planted<64> (sm_90): 1 block(s) per SM"));
  EXPECT_TRUE(found("bounded_kernel (sm_90): launched with 512 threads, bounds 256"));
  EXPECT_TRUE(found("orphan_kernel (sm_90): never launched"));
  EXPECT_TRUE(found("flash_planted<64> (sm_89): 122880 bytes of shared memory"));
  // An exception that is no longer needed is reported too.
  const std::vector<std::string> stale =
      check_kernels({{80, "flash_planted<64>", 96, 0, 128}},
                    Census{{{"flash_planted<64>", 128}}, {}}, {{"flash_planted<64>", 80, 1}});
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_NE(stale[0].find("drop its exception"), std::string::npos) << stale[0];
}

// ptxas's report and the PTX's bounds are read as ptxas and nvcc write them.
TEST(GpuGatePtxas, ReportsParse) {
  const std::string report =
      "ptxas info    : Compiling entry function '_ZN4kiln4cuda12_GLOBAL__N_16kernelILi64EEEvPf' "
      "for 'sm_90'\n"
      "ptxas info    : Function properties for _ZN4kiln4cuda12_GLOBAL__N_16kernelILi64EEEvPf\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 34816 bytes smem, 400 bytes cmem[0]\n";
  const std::string ptx =
      ".visible .entry _ZN4kiln4cuda12_GLOBAL__N_16kernelILi64EEEvPf(\n"
      "\t.param .u64 p\n)\n.maxntid 128, 1, 1\n.minnctapersm 1\n{\n}\n";
  const std::vector<KernelResources> k = parse_ptxas(report, ptx);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].sm, 90);
  EXPECT_EQ(k[0].name, "kernel<64>");
  EXPECT_EQ(k[0].registers, 168);
  EXPECT_EQ(k[0].static_shared, 34816u);
  EXPECT_EQ(k[0].max_threads, 128);
}

}  // namespace
}  // namespace kiln::gates
