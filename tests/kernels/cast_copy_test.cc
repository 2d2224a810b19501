// CastCopy: host fp32 to device F32 or BF16 and back. BF16 is rounded to nearest even going in
// and widened exactly coming out, in pieces through one staging buffer of at most
// kCastCopyPieceFloats that later copies reuse (the device memory in use does not grow), for a
// copy longer than a piece too.
#include "kiln/kernels/device/cast_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/test_backend.h"

namespace kiln {
namespace {

std::vector<float> values(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 1.0f + static_cast<float>(i % 1000) * 1.2345e-4f;
  return v;
}

TEST(CastCopy, Bf16RoundsInPiecesThroughOneReusedStagingBuffer) {
  const Backend& be = testing::cpu_fp32();
  const size_t n = kCastCopyPieceFloats + 1001;  // two pieces, the second short
  const std::vector<float> host = values(n);
  DeviceBuffer<float> dev(be, storage_floats(n, DType::BF16));
  CastCopy copy(be);
  copy.to_device(dev.data(), DType::BF16, host.data(), n);
  be.synchronize();
  EXPECT_EQ(copy.staging_bytes(), kCastCopyPieceFloats * sizeof(float));
  std::vector<uint16_t> stored(n);
  std::memcpy(stored.data(), dev.data(), n * sizeof(uint16_t));  // CPU: device memory is host's
  size_t rounded = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(stored[i], f32_to_bf16(host[i])) << i;
    rounded += bf16_to_f32(stored[i]) != host[i];
  }
  EXPECT_GT(rounded, n / 2);
  // Later copies, either way and of any size, reuse the staging buffer.
  const size_t in_use = be.memory_stats().in_use;
  std::vector<float> back(n);
  copy.to_host(back.data(), dev.data(), DType::BF16, n);
  copy.to_device(dev.data(), DType::BF16, host.data(), 10);
  be.synchronize();
  EXPECT_EQ(be.memory_stats().in_use, in_use);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], bf16_to_f32(stored[i])) << i;
  copy.release();
  EXPECT_EQ(copy.staging_bytes(), 0u);
  EXPECT_LT(be.memory_stats().in_use, in_use);
}

TEST(CastCopy, F32IsAPlainCopyWithoutStaging) {
  const Backend& be = testing::cpu_fp32();
  const std::vector<float> host = values(777);
  DeviceBuffer<float> dev(be, host.size());
  std::vector<float> back(host.size());
  CastCopy copy(be);
  copy.to_device(dev.data(), DType::F32, host.data(), host.size());
  copy.to_host(back.data(), dev.data(), DType::F32, host.size());
  be.synchronize();
  EXPECT_EQ(back, host);
  EXPECT_EQ(copy.staging_bytes(), 0u);
}

}  // namespace
}  // namespace kiln
