// A micro-batch of token sequences as the model consumes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/base/ignore_index.h"

namespace kiln {

// All arrays are (B*T), row-major by sequence.
struct Batch {
  int B = 0;
  int T = 0;
  std::vector<int32_t> input_ids;  // token at each position
  // Next-token target of each position: targets[b*T+t] = labels[b*T+t+1] (HF causal-LM shift),
  // kIgnoreIndex where no loss is taken (masked labels, padding, the last position).
  std::vector<int32_t> targets;
  std::vector<int32_t> positions;  // rotary position of each token (restarts at each document)
  // Index t0 (within the row) of the first token of the token's document: token t attends to
  // keys [doc_start[t], t]. All zeros for unpacked sequences.
  std::vector<int32_t> doc_start;
  // The dataset index of the example each row holds (a preference pair's: both its rows), or -1
  // (padding, or a sampler that does not say: the packing one).
  std::vector<int64_t> examples;

  void resize(int b, int t) {
    B = b;
    T = t;
    size_t n = static_cast<size_t>(b) * t;
    input_ids.assign(n, 0);
    targets.assign(n, kIgnoreIndex);
    positions.assign(n, 0);
    doc_start.assign(n, 0);
    examples.assign(static_cast<size_t>(b), -1);
  }
  int64_t num_targets() const {
    int64_t n = 0;
    for (int32_t t : targets) n += t != kIgnoreIndex;
    return n;
  }
  // Of a preference batch (rows 2p and 2p + 1 a pair's chosen and rejected sequences): the pairs
  // whose two rows both have a target, those a preference loss counts.
  int64_t num_pairs() const {
    const auto has_target = [&](int row) {
      for (int t = 0; t < T; ++t) {
        if (targets[static_cast<size_t>(row) * T + t] != kIgnoreIndex) return true;
      }
      return false;
    };
    int64_t n = 0;
    for (int p = 0; 2 * p + 1 < B; ++p) n += has_target(2 * p) && has_target(2 * p + 1);
    return n;
  }
};

}  // namespace kiln
