#include "kiln/kernels/dropout_mask.h"

#include <cmath>

#include "kiln/base/error.h"

namespace kiln {

DropoutMask dropout_mask_for(float p, uint64_t seed, uint64_t offset) {
  KILN_CHECK(p >= 0.0f && p < 1.0f, "dropout: p {} is outside [0, 1)", p);
  DropoutMask m;
  m.seed = seed;
  m.offset = offset;
  // round(p 2^32) < 2^32 for every float p < 1 (the largest, 1 - 2^-24, gives 2^32 - 2^8).
  m.threshold = static_cast<uint32_t>(std::nearbyint(static_cast<double>(p) * 0x1p32));
  m.scale = static_cast<float>(1.0 / (1.0 - static_cast<double>(p)));
  return m;
}

}  // namespace kiln
