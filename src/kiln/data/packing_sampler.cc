#include "kiln/data/packing_sampler.h"

#include <algorithm>
#include <numeric>

#include "kiln/base/error.h"

namespace kiln {

PackingSampler::PackingSampler(const ExampleSource& dataset, int micro_batch_size, int seq_len,
                               bool shuffle, uint64_t seed, int rank, int world_size)
    : dataset_(&dataset),
      micro_batch_size_(micro_batch_size),
      seq_len_(seq_len),
      shuffle_(shuffle),
      seed_(seed),
      rank_(rank),
      world_size_(world_size) {
  KILN_CHECK(micro_batch_size > 0 && seq_len > 0, "B={} T={}", micro_batch_size, seq_len);
  KILN_CHECK(world_size > 0 && rank >= 0 && rank < world_size, "rank {} of {}", rank, world_size);
  per_rank_ = dataset.size() / static_cast<size_t>(world_size);
  if (per_rank_ == 0) {
    fail("{}: {} examples are too few for {} ranks", dataset.what(), dataset.size(), world_size);
  }
  build_order(0);
}

void PackingSampler::build_order(uint64_t epoch) {
  epoch_order(order_, dataset_->size(), shuffle_, seed_, epoch);
}

void PackingSampler::restore(const SamplerState& state) {
  if (state.index > per_rank_) {
    fail(
        "{}: sampler state index {} is past the {} examples of this rank's epoch (did the data or "
        "the number of ranks change?)",
        dataset_->what(), state.index, per_rank_);
  }
  if (state.epoch != state_.epoch) build_order(state.epoch);
  state_ = state;
}

ExampleView PackingSampler::peek() {
  if (state_.index == per_rank_) {
    build_order(state_.epoch + 1);
    state_ = {state_.epoch + 1, 0};
  }
  const size_t pos = static_cast<size_t>(rank_) + state_.index * static_cast<size_t>(world_size_);
  return dataset_->example(order_[pos]);
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
  const int B = micro_batch_size_, T = seq_len_;
  out.resize(B, T);
  for (int b = 0; b < B; ++b) {
    int used = 0;
    while (used < T) {
      const ExampleView ex = peek();
      const int len = static_cast<int>(std::min(ex.size(), static_cast<size_t>(T)));
      if (used > 0 && used + len > T) break;  // starts the next row
      place_document(out, b, used, ex, len);
      used += len;
      ++state_.index;
    }
    // Padding is a document of its own, so it costs no attention over the row's examples.
    const size_t row = static_cast<size_t>(b) * T;
    for (int t = used; t < T; ++t) {
      out.doc_start[row + t] = used;
      out.positions[row + t] = t - used;
    }
  }
}

}  // namespace kiln
