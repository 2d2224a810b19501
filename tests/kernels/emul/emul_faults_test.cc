// The emulator's teeth: each class of fault it claims to catch (emulator.h), planted in a small
// kernel (faulty_kernels.cc) or provoked in a real one, is reported as that fault; the correct
// twins run clean.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/emul/emul_test_util.h"
#include "kernels/emul/faulty_kernels.h"
#include "kiln/base/error.h"
#include "kiln/kernels/cuda/column_sums.h"
#include "kiln/kernels/cuda/pointwise_ops.h"

namespace kiln::emul {
namespace {

// The fault the launches in `run` leave, which must contain `what`.
template <typename F>
void expect_fault(const std::string& what, F run) {
  run();
  const std::string f = take_fault();
  EXPECT_NE(f.find(what), std::string::npos)
      << "expected a fault with \"" << what << "\", got \"" << f << "\"";
  std::printf("[ emul     ] caught: %s\n", f.c_str());
}

TEST(EmulFaults, BarrierMissedBySomeThreads) {
  DeviceArray<float> out(64, "out");
  expect_fault("wait at __syncthreads", [&] { faulty::missed_barrier(out.get(), 16); });
  faulty::missed_barrier(out.get(), 64);  // every thread reaches it: fine
  expect_no_fault();
}

TEST(EmulFaults, ThreadsExitWhileOthersWait) {
  DeviceArray<float> out(64, "out");
  expect_fault("exit", [&] { faulty::early_exit(out.get()); });
}

TEST(EmulFaults, ThreadsAtDifferentBarriers) {
  DeviceArray<float> out(64, "out");
  expect_fault("different __syncthreads", [&] { faulty::divergent_barriers(out.get()); });
}

TEST(EmulFaults, SharedReadRacingAWrite) {
  DeviceArray<float> out(64, "out");
  expect_fault("shared memory race", [&] { faulty::neighbour(out.get(), false); });
  faulty::neighbour(out.get(), true);
  expect_no_fault();
  for (int t = 0; t < 64; ++t) EXPECT_EQ(out.host()[t], static_cast<float>((t + 1) % 64 + 1));
}

TEST(EmulFaults, SharedWriteRacingARead) {
  DeviceArray<float> out(64, "out");
  expect_fault("shared memory race", [&] { faulty::overwrite(out.get()); });
}

TEST(EmulFaults, SharedIndexOutOfBounds) {
  DeviceArray<float> out(64, "out");
  expect_fault("'tile'", [&] { faulty::shared_index(out.get(), 1); });
  faulty::shared_index(out.get(), 0);
  expect_no_fault();
}

TEST(EmulFaults, GlobalIndexOutOfBounds) {
  DeviceArray<float> out(64, "out");
  expect_fault("out of bounds", [&] { faulty::global_index(out.get(), 1); });
  expect_fault("out of bounds", [&] { faulty::global_index(out.get(), -1); });
  faulty::global_index(out.get(), 0);
  expect_no_fault();
}

TEST(EmulFaults, UninitializedSharedRead) {
  DeviceArray<float> out(64, "out");
  expect_fault("not written", [&] { faulty::uninitialized(out.get()); });
}

TEST(EmulFaults, MisalignedVectorStore) {
  DeviceArray<float> out(130, "out");
  expect_fault("misaligned", [&] { faulty::float2_store(out.get(), 1); });
  faulty::float2_store(out.get(), 2);
  expect_no_fault();
}

TEST(EmulFaults, BlocksWritingTheSameElements) {
  DeviceArray<float> out(64, "out");
  expect_fault("device memory race", [&] { faulty::blocks_write_one_row(out.get(), 2); });
  faulty::blocks_write_one_row(out.get(), 1);
  expect_no_fault();
}

TEST(EmulFaults, ShuffleWithLanesThatLeft) {
  DeviceArray<float> out(64, "out");
  expect_fault("exit", [&] { faulty::shuffle_after_exit(out.get()); });
}

TEST(EmulFaults, FullMaskShuffleInAPartialWarp) {
  DeviceArray<float> out(64, "out");
  expect_fault("only 16 lanes", [&] { faulty::warp_sum(out.get(), 48); });
  faulty::warp_sum(out.get(), 64);
  expect_no_fault();
  EXPECT_EQ(out.host()[0], 496.0f);    // 0 + 1 + ... + 31
  EXPECT_EQ(out.host()[40], 1520.0f);  // 32 + ... + 63
}

TEST(EmulFaults, DynamicSharedMemoryLimits) {
  DeviceArray<float> out(64, "out");
  expect_fault("out of bounds", [&] { faulty::dynamic_shared(out.get(), 1024, 1028, false); });
  expect_fault("cudaFuncSetAttribute",
               [&] { faulty::dynamic_shared(out.get(), 64 << 10, 64 << 10, false); });
  faulty::dynamic_shared(out.get(), 64 << 10, 64 << 10, true);
  expect_no_fault();
}

TEST(EmulFaults, AtomicsDoNotRace) {
  DeviceArray<int> out(64, "out");
  faulty::atomic_min(out.get());
  expect_no_fault();
  EXPECT_EQ(out.host()[5], 100 - 63);
}

// A real kernel given a buffer one element short: the column sums' db (OC).
TEST(EmulFaults, RealKernelWithAShortBuffer) {
  constexpr int N = 5, OC = 40;
  DeviceArray<float> dout(random_values(N * OC, 1), "dout");
  DeviceArray<float> db(OC - 1, "db");
  EXPECT_THROW(emul_cuda::add_column_sums(db.get(), dout.get(), N, OC, nullptr), Error);
  expect_fault("device buffer 'db' (156 bytes) + 156", [] {});
}

// A faulted device runs nothing more until the fault is taken, and KILN_CUDA_CHECK throws it.
TEST(EmulFaults, FaultsAreSticky) {
  DeviceArray<float> out(64, "out");
  faulty::global_index(out.get(), 1);
  EXPECT_THROW(emul_cuda::scale(out.get(), 2.0f, 64, nullptr), Error);
  EXPECT_NE(take_fault().find("out of bounds"), std::string::npos);
}

}  // namespace
}  // namespace kiln::emul
