// Random initialisation of a fresh model, reproducible across machines (own PRNG, no std::
// distributions): matrices N(0, std^2) as HF's initializer_range, biases 0, norm weights 1.
// LoRA adapters as PEFT starts them: A (r, in) Kaiming-uniform with a = sqrt(5), i.e.
// U(-1/sqrt(in), 1/sqrt(in)), and B zero, so a fresh adapter leaves the base's outputs unchanged.
// Every tensor draws from its own stream (the seed and its name), so the values do not depend on
// the layout, the order or the world size.
#pragma once

#include <cstdint>

#include "kiln/model/unit_access.h"

namespace kiln {

void init_params(ParamStore& store, const ParamLayout& layout, uint64_t seed, float std = 0.02f);
// The adapter units only (a fresh adapter on a loaded base).
void init_lora_params(ParamStore& store, const ParamLayout& layout, uint64_t seed);
// Unit `unit`'s initial values into host memory, out: (numel of the unit).
void init_unit_values(const ParamLayout& layout, int unit, uint64_t seed, float* out,
                      float std = 0.02f);

// splitmix64: small, fast, well-mixed; the same stream on every platform.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

}  // namespace kiln
