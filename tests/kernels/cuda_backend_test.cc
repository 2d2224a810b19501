// What only the CUDA backend has: its names and dtypes, and the cuBLASLt algorithm cache (one
// heuristic query per product shape). Every op's results against the CPU are the parity suite's
// (backend_parity_test, backend_parity_products_test). Needs a GPU: skips with the reason on a
// machine without one (CI), where the file still compiles.
#include "kiln/kernels/cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "common/grad_check.h"
#include "kernels/parity_util.h"
#include "kiln/kernels/cuda/cuda_devices.h"
#include "kiln/kernels/device/backend.h"

namespace kiln {
namespace {

using testing::DeviceMem;
using testing::random_vec;

std::unique_ptr<Backend> gpu_backend(ComputeDType t) {
  return make_backend(DeviceRequest::kCuda, t, 0);
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaDevices d = cuda_devices();
    if (d.count == 0) GTEST_SKIP() << "no GPU visible (" << d.reason << ")";
  }
};

// Without the driver's library the runtime says "CUDA driver version is insufficient for CUDA
// runtime version", as it does for an old driver: the reason names the missing driver instead.
TEST(CudaDevices, NoDriverIsNamedAsSuch) {
  const std::string runtime = "CUDA driver version is insufficient for CUDA runtime version";
  EXPECT_EQ(no_gpu_reason(runtime, /*driver_library_loads=*/false),
            "no NVIDIA driver (libcuda.so.1 not found)");
  EXPECT_EQ(no_gpu_reason(runtime, /*driver_library_loads=*/true), runtime);  // an old driver
}

TEST(CudaDevices, ThisMachineWithoutADriver) {
  if (driver_library_loads()) GTEST_SKIP() << "libcuda.so.1 loads here";
  const CudaDevices d = cuda_devices();
  EXPECT_EQ(d.count, 0);
  EXPECT_EQ(d.reason, "no NVIDIA driver (libcuda.so.1 not found)");
}

TEST_F(CudaBackendTest, MatmulAlgorithmsAreCachedPerShape) {
  const auto be = gpu_backend(ComputeDType::kBf16);
  const auto* cuda = dynamic_cast<const CudaBackend*>(be.get());
  ASSERT_NE(cuda, nullptr);
  DeviceMem m(*be);
  const float* x = m.up(random_vec(64 * 32, 1));
  const float* w = m.up(random_vec(16 * 32, 2));
  float* out = m.zeros<float>(64 * 16);
  be->matmul_forward(out, x, w, static_cast<const float*>(nullptr), 64, 32, 16);
  const size_t after_one = cuda->cached_gemm_plans();
  EXPECT_EQ(after_one, 1u);
  be->matmul_forward(out, x, w, static_cast<const float*>(nullptr), 64, 32, 16);
  EXPECT_EQ(cuda->cached_gemm_plans(), after_one);
  be->matmul_forward(out, x, w, static_cast<const float*>(nullptr), 32, 32, 16);
  EXPECT_EQ(cuda->cached_gemm_plans(), after_one + 1);
}

TEST_F(CudaBackendTest, Identity) {
  const auto fp32 = gpu_backend(ComputeDType::kFp32);
  const auto bf16 = gpu_backend(ComputeDType::kBf16);
  EXPECT_EQ(fp32->name(), "cuda");
  EXPECT_EQ(bf16->name(), "cuda-bf16");
  EXPECT_EQ(fp32->device(), Device::kCuda);
  EXPECT_EQ(fp32->activation_dtype(), DType::F32);
  EXPECT_EQ(bf16->activation_dtype(), DType::BF16);
  EXPECT_TRUE(fp32->supports(ComputeDType::kBf16));
  EXPECT_EQ(bf16->compute_dtype(), ComputeDType::kBf16);
}

}  // namespace
}  // namespace kiln
