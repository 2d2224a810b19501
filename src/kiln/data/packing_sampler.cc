#include "kiln/data/packing_sampler.h"

#include <algorithm>

#include "kiln/base/error.h"

namespace kiln {

PackingSampler::PackingSampler(const ExampleSource& dataset, int micro_batch_size, int seq_len,
                               bool shuffle, uint64_t seed, int rank, int world_size)
    : OrderedSampler(dataset, micro_batch_size, seq_len, shuffle, seed, rank, world_size) {
  if (dataset.size() == 0) fail("{}: no examples to pack", dataset.what());
}

ExampleView PackingSampler::peek() {
  if (state_.position == dataset_->size()) {
    build_order(state_.epoch + 1);
    state_ = {state_.epoch + 1, 0};
  }
  return dataset_->example(order_[state_.position]);
}

void place_document(Batch& out, int b, int at, ExampleView ex, int len) {
  const size_t row = static_cast<size_t>(b) * out.T + at;
  for (int t = 0; t < len; ++t) {
    out.input_ids[row + t] = ex.input_ids[t];
    out.positions[row + t] = t;
    out.doc_start[row + t] = at;
    // HF shift within the document; its last token predicts nothing (not the next document).
    out.targets[row + t] = t + 1 < len ? ex.labels[t + 1] : kIgnoreIndex;
  }
}

void PackingSampler::next(Batch& out) {
  const int B = micro_batch_size_, T = seq_len_, W = world_size_;
  out.resize(B, T);
  for (int g = 0; g < B * W; ++g) {  // the group's rows in order; this rank fills its own
    const bool mine = g % W == rank_;
    const int b = g / W;
    int used = 0;
    while (used < T) {
      const ExampleView ex = peek();
      const int len = static_cast<int>(std::min(ex.size(), static_cast<size_t>(T)));
      if (used > 0 && used + len > T) break;  // starts the next row
      if (mine) place_document(out, b, used, ex, len);
      used += len;
      ++state_.position;
    }
    if (!mine) continue;
    // Padding is a document of its own, so it costs no attention over the row's examples.
    const size_t row = static_cast<size_t>(b) * T;
    for (int t = used; t < T; ++t) {
      out.doc_start[row + t] = used;
      out.positions[row + t] = t - used;
    }
  }
}

}  // namespace kiln
