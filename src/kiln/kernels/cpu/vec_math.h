// Vectorisable scalar math for kernel loops. std::exp is a libm call the compiler cannot
// vectorise (without -ffast-math), so a softmax or SiLU over a row ran one element per call;
// these are plain float code (no branches, no calls) that GCC and Clang turn into AVX-512 / AVX2
// inside a `#pragma omp simd` loop.
#pragma once

#include <bit>
#include <cstdint>

namespace kiln::vec {

// e^x for float x, relative error < 2e-7 (Cephes expf: range reduction by ln 2 and a degree-6
// polynomial), 0 for x below -87.3 (including -inf), +inf above 88.72 (float overflow).
#pragma omp declare simd notinbranch
inline float exp(float x) {
  const float xc = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  // rint (round to nearest even in the default rounding mode), not roundeven: GCC 12 has a
  // vector pattern (vrndscaleps) for the first only, and without one no loop calling exp that
  // also stores is vectorised.
  const float n = __builtin_rintf(xc * 1.44269504088896341f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  const float y = p * std::bit_cast<float>(bits);
  return x < -87.3f ? 0.0f : (x > 88.72f ? __builtin_inff() : y);
}

// Logistic sigmoid 1 / (1 + e^-x).
#pragma omp declare simd notinbranch
inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

}  // namespace kiln::vec
