// make_backend: which backend each train.device gives on this machine, and the one-line errors
// for a device it cannot serve. On a machine without a GPU (CI) the CUDA requests are checked
// for their errors and fallbacks; with one, for the CUDA backend they give.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "common/error_of.h"
#include "kiln/base/error.h"
#include "kiln/kernels/device/backend.h"

#ifdef KILN_HAVE_CUDA
#include "kiln/kernels/cuda/cuda_devices.h"
#endif

namespace kiln {
namespace {

// Whether this build and machine can run the CUDA backend.
bool gpu_visible() {
#ifdef KILN_HAVE_CUDA
  return cuda_devices().count > 0;
#else
  return false;
#endif
}

std::string error_of(DeviceRequest d, ComputeDType t) {
  return testing::error_of([&] { make_backend(d, t); });
}

TEST(MakeBackend, CudaWithoutGpuIsOneLineError) {
  if (gpu_visible()) GTEST_SKIP() << "a GPU is visible: train.device=cuda succeeds here";
  for (const ComputeDType t : {ComputeDType::kFp32, ComputeDType::kBf16}) {
    const std::string msg = error_of(DeviceRequest::kCuda, t);
    EXPECT_EQ(msg.rfind("train.device: cuda: ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
#ifdef KILN_HAVE_CUDA
    // The runtime's reason, e.g. "(CUDA driver version is insufficient for CUDA runtime version)"
    EXPECT_EQ(msg.rfind("train.device: cuda: no GPU visible (", 0), 0u) << msg;
    EXPECT_GT(msg.size(), std::string("train.device: cuda: no GPU visible ()").size()) << msg;
    EXPECT_EQ(msg.back(), ')') << msg;
#else
    EXPECT_NE(msg.find("built without a CUDA backend"), std::string::npos) << msg;
#endif
  }
}

TEST(MakeBackend, AutoWithoutGpuIsTheCpu) {
  if (gpu_visible()) GTEST_SKIP() << "a GPU is visible: train.device=auto picks CUDA here";
  EXPECT_EQ(make_backend(DeviceRequest::kAuto, ComputeDType::kFp32)->device(), Device::kCpu);
  const auto bf16 = make_backend(DeviceRequest::kAuto, ComputeDType::kBf16);
  EXPECT_EQ(bf16->device(), Device::kCpu);
  EXPECT_EQ(bf16->compute_dtype(), ComputeDType::kBf16);
}

TEST(MakeBackend, CpuIsAlwaysTheCpu) {
  EXPECT_EQ(make_backend(DeviceRequest::kCpu, ComputeDType::kFp32)->device(), Device::kCpu);
}

TEST(MakeBackend, CudaOnAGpu) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU visible: the CUDA backend cannot be made here";
  const auto fp32 = make_backend(DeviceRequest::kCuda, ComputeDType::kFp32, 0);
  EXPECT_EQ(fp32->device(), Device::kCuda);
  EXPECT_EQ(fp32->name(), "cuda");
  EXPECT_EQ(fp32->activation_dtype(), DType::F32);
  const auto bf16 = make_backend(DeviceRequest::kAuto, ComputeDType::kBf16, 0);
  EXPECT_EQ(bf16->device(), Device::kCuda);
  EXPECT_EQ(bf16->name(), "cuda-bf16");
  EXPECT_EQ(bf16->activation_dtype(), DType::BF16);
}

// LOCAL_RANK set for the duration of a test, restored after.
class ScopedLocalRank {
 public:
  explicit ScopedLocalRank(const char* v) {
    if (const char* old = std::getenv("LOCAL_RANK")) {
      old_ = old;
      had_ = true;
    }
    if (v == nullptr) {
      ::unsetenv("LOCAL_RANK");
    } else {
      ::setenv("LOCAL_RANK", v, 1);
    }
  }
  ~ScopedLocalRank() {
    if (had_) {
      ::setenv("LOCAL_RANK", old_.c_str(), 1);
    } else {
      ::unsetenv("LOCAL_RANK");
    }
  }

 private:
  std::string old_;
  bool had_ = false;
};

TEST(MakeBackend, LocalRankFromEnv) {
  {
    const ScopedLocalRank r(nullptr);
    EXPECT_EQ(local_rank_from_env(), 0);
  }
  {
    const ScopedLocalRank r("3");
    EXPECT_EQ(local_rank_from_env(), 3);
  }
  for (const char* bad : {"x", "-1", "2a"}) {
    const ScopedLocalRank r(bad);
    EXPECT_THROW(local_rank_from_env(), Error) << bad;
  }
}

}  // namespace
}  // namespace kiln
