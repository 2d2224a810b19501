#include "kiln/tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kiln {
namespace {

TEST(DType, Bf16RoundTripAndRounding) {
  for (float f : {0.0f, 1.0f, -2.5f, 3.140625f, 0x1p-66f, 65024.0f}) {
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(f)), f) << f;  // all exactly representable
  }
  // 1 + 2^-8 is halfway between two bf16 values; round to even -> 1.0
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3*2^-8 is halfway; round to even -> 1 + 2^-6... check it lands on 1 + 4*2^-8
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, F16MatchesEveryEncoding) {
  // Every finite f16 value converts to f32 and back to the same bits.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t b = static_cast<uint16_t>(h);
    if ((b & 0x7c00) == 0x7c00 && (b & 0x3ff)) continue;  // NaN payloads
    float f = f16_to_f32(b);
    EXPECT_EQ(f32_to_f16(f), b) << std::hex << h;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // rounds up to inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // halfway to the smallest: even -> 0
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(DType, Names) {
  EXPECT_EQ(dtype_from_name("BF16"), DType::BF16);
  EXPECT_FALSE(dtype_from_name("I64").has_value());
  EXPECT_EQ(dtype_from_cli("bf16"), DType::BF16);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
}

}  // namespace
}  // namespace kiln
