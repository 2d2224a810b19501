// Element types kiln reads, writes and computes in, with exact conversions to and from f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

enum class DType : uint8_t { F32, BF16, F16 };

size_t dtype_size(DType t);
// Safetensors spelling: "F32", "BF16", "F16".
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
// Lower-case CLI/recipe spelling: "f32", "bf16", "f16".
std::optional<DType> dtype_from_cli(std::string_view name);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even, overflow to inf

// Converts n elements of `src` (dtype `from`) into f32.
void convert_to_f32(DType from, const void* src, float* dst, size_t n);
// Converts n f32 elements into `dst` of dtype `to`.
void convert_from_f32(DType to, const float* src, void* dst, size_t n);

}  // namespace kiln
