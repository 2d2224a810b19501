// cuda_bf16.h as the CPU emulator provides it: the bf16 storage types and the conversions kiln's
// kernels use, rounding as the toolkit's do (to nearest even; NaN to the canonical 0x7fff;
// denormals kept, unlike kiln's own bf16_bits, which flushes them).
#pragma once

#include <bit>
#include <cstdint>

struct __nv_bfloat16 {
  uint16_t __x;
  __nv_bfloat16() = default;
};

struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

namespace kiln::emul {
inline uint16_t float_to_bf16_rn(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
}  // namespace kiln::emul

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  __nv_bfloat16 h;
  h.__x = kiln::emul::float_to_bf16_rn(f);
  return h;
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h.__x) << 16);
}
// .x (the low half of the 32-bit word) = lo, .y = hi.
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
