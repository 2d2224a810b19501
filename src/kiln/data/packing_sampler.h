// Packing: several examples per row of seq_len tokens, so short examples do not pay for padding.
//
// The epoch's visiting order is the unpacked Sampler's (identity or epoch_permutation(seed,
// epoch)), read front to back by the whole group: a micro-batch fills the group's B * W rows in
// order (row g = b * W + r is row b of rank r), each row greedily: an example goes into the
// current row if it fits in what is left of it, else it starts the next row; no example is split
// (one longer than seq_len, which the loader normally prevents, is cut to seq_len in a row of its
// own). Every rank walks the same rows (it needs only the examples' lengths) and fills its own.
// When the epoch runs out, the next epoch's order continues the same row, so no example is left
// out. The state is (epoch, examples of the order taken), the same on every rank, so a restored
// sampler packs exactly the same rows, and one on another world size continues with the next
// example.
//
// Each example in a row is a document of its own:
//   row [a0 a1 a2 | b0 b1 | pad pad]   doc_start = [0 0 0 | 3 3 | 5 5]
//                                      positions = [0 1 2 | 0 1 | 0 1]
//                                      targets   = [a1 a2 X | b1 X | X X]
// attention never crosses a boundary, rotary positions restart, and an example's last token has
// no target, so nothing predicts the next example's first token: each example's loss and
// gradient are what they would be alone. Padding is id 0 with no target.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/data/sampler.h"

namespace kiln {

class PackingSampler : public OrderedSampler {
 public:
  // `dataset` must outlive the sampler. Throws kiln::Error if it has no examples.
  PackingSampler(const ExampleSource& dataset, int micro_batch_size, int seq_len, bool shuffle,
                 uint64_t seed, int rank = 0, int world_size = 1);

  void next(Batch& out) override;

 private:
  // The next example of the order (moving to the next epoch first when this one is used up),
  // without taking it.
  ExampleView peek();
};

// Writes `ex` (cut to `len` tokens) into row b of `out` at column `at`, as one packed document:
// ids, positions 0..len-1, doc_start = at, shifted targets with none at its last token.
void place_document(Batch& out, int b, int at, ExampleView ex, int len);

}  // namespace kiln
