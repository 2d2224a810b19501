// Choosing the next token from logits: greedy, or temperature + top-p (nucleus) sampling with
// kiln's own seeded PRNG, so a seed gives the same tokens on every machine.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kiln/model/init.h"

namespace kiln {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy (argmax); else logits are divided by it
  double top_p = 1.0;        // (0, 1]: sample among the smallest set of most likely tokens
                             // whose probability reaches top_p
};

class Sampler {
 public:
  // Errors (kiln::Error) for a negative temperature or top_p outside (0, 1].
  Sampler(const SamplingOptions& options, uint64_t seed);

  // The chosen id in [0, logits.size()). Greedy picks the first maximum. Sampling keeps the
  // nucleus (tokens ranked by probability, ties by id) and draws one uniform number per call.
  // Errors (kiln::Error) when a logit is NaN or the maximum is infinite.
  int32_t sample(std::span<const float> logits);

 private:
  SamplingOptions o_;
  SplitMix64 rng_;
  std::vector<double> prob_;   // (V) unnormalised exp((logit - max) / temperature)
  std::vector<int32_t> rank_;  // ids, partitioned by probability
  std::vector<uint8_t> keep_;  // (V) 1 for the nucleus
};

}  // namespace kiln
