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

  void resize(int b, int t) {
    B = b;
    T = t;
    size_t n = static_cast<size_t>(b) * t;
    input_ids.assign(n, 0);
    targets.assign(n, kIgnoreIndex);
    positions.assign(n, 0);
    doc_start.assign(n, 0);
  }
  int64_t num_targets() const {
    int64_t n = 0;
    for (int32_t t : targets) n += t != kIgnoreIndex;
    return n;
  }
};

}  // namespace kiln
