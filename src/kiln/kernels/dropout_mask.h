// The dropout mask of Backend::dropout (ops.h), one definition for every backend: the CPU's loop
// and the CUDA kernel (host and device code) call these functions, so a mask is the same bit for
// bit wherever it is drawn, and tools/decoder_reference.py repeats it in numpy.
//
// Element i of a call (seed, offset) is kept when the top 32 bits of splitmix64's output number
// offset + i + 1 from state `seed` (Steele, Lea and Flood 2014: z = seed + (k + 1) * gamma, then
// its finaliser) are at least round(p * 2^32): a pure function of (seed, offset + i), so the
// backward redraws the forward's mask from the same two numbers instead of storing it, and a
// recomputed forward draws it again. Two seeds give the one 2^64-long sequence shifted by
// (seed' - seed) / gamma (mod 2^64) elements; seeds from dropout_stream_seed are hashed, so the
// shifts are effectively random and two masks of a run share a stretch only by a ~n / 2^64
// coincidence (n elements each).
#pragma once

#include <cstdint>

#include "kiln/kernels/cuda/host_device.h"

namespace kiln {

inline constexpr uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ull;

// splitmix64's output number k + 1 from state `seed`.
KILN_HOST_DEVICE inline uint64_t splitmix64_at(uint64_t seed, uint64_t k) {
  uint64_t z = seed + (k + 1) * kSplitMixGamma;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One dropout call's constants, computed once on the host.
struct DropoutMask {
  uint64_t seed = 0;
  uint64_t offset = 0;
  uint32_t threshold = 0;  // keep when the hash's top 32 bits are >= this: P(keep) = 1 - p
  float scale = 1.0f;      // 1 / (1 - p), the kept elements' factor (inverted dropout)
};

// The constants of a call with p in [0, 1) (KILN_CHECKed; defined in dropout_mask.cc, so nvcc
// never compiles the check's formatting).
DropoutMask dropout_mask_for(float p, uint64_t seed, uint64_t offset);

KILN_HOST_DEVICE inline bool dropout_keep(const DropoutMask& m, uint64_t i) {
  return static_cast<uint32_t>(splitmix64_at(m.seed, m.offset + i) >> 32) >= m.threshold;
}

// Element i of the output for input v: v / (1 - p) when kept, else 0 (also for a dropped NaN or
// infinity: a select, not a product with the mask).
KILN_HOST_DEVICE inline float dropout_value(const DropoutMask& m, uint64_t i, float v) {
  const float kept = v * m.scale;  // computed either way: a select, which vectorises
  return dropout_keep(m, i) ? kept : 0.0f;
}

// The seed of one independent stream, `stream` of a parent seed (a layer's and target's mask from
// a micro-batch's seed): hashed, so sibling streams do not overlap (see above).
inline uint64_t dropout_stream_seed(uint64_t parent, uint64_t stream) {
  return splitmix64_at(parent, stream);
}

}  // namespace kiln
