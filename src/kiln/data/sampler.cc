#include "kiln/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "kiln/base/error.h"
#include "kiln/data/preference_pairs.h"

namespace kiln {

namespace {

// splitmix64 (Steele, Lea, Flood 2014): tiny, fast and fully specified, so an order is the same
// on every platform and standard library.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0, without modulo bias: rejects the lowest 2^64 mod n values, leaving
  // a range whose size is a multiple of n.
  uint64_t below(uint64_t n) {
    uint64_t threshold = (0 - n) % n;
    for (;;) {
      uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

 private:
  uint64_t state_;
};

}  // namespace

std::vector<size_t> epoch_permutation(size_t n, uint64_t seed, uint64_t epoch) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  // Hash the seed first so nearby seeds and epochs give unrelated streams.
  uint64_t key = SplitMix64(seed).next() ^ (epoch * 0xD1B54A32D192ED03ull);
  SplitMix64 rng(key);
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

OrderedSampler::OrderedSampler(const ExampleSource& dataset, int micro_batch_size, int seq_len,
                               bool shuffle, uint64_t seed, int rank, int world_size,
                               int rows_per_example)
    : dataset_(&dataset),
      micro_batch_size_(micro_batch_size),
      seq_len_(seq_len),
      shuffle_(shuffle),
      seed_(seed),
      rank_(rank),
      world_size_(world_size),
      rows_per_example_(rows_per_example) {
  KILN_CHECK(micro_batch_size > 0 && seq_len > 0, "B={} T={}", micro_batch_size, seq_len);
  KILN_CHECK(rows_per_example > 0 && micro_batch_size % rows_per_example == 0,
             "B={}: not a multiple of {} rows per example", micro_batch_size, rows_per_example);
  KILN_CHECK(world_size > 0 && rank >= 0 && rank < world_size, "rank {} of {}", rank, world_size);
  build_order(0);
}

void OrderedSampler::build_order(uint64_t epoch) {
  const size_t n = dataset_->size();
  if (shuffle_) {
    order_ = epoch_permutation(n, seed_, epoch);
  } else if (order_.size() != n) {
    order_.resize(n);
    std::iota(order_.begin(), order_.end(), size_t{0});
  }
}

void OrderedSampler::restore(const SamplerState& state) {
  if (state.position > dataset_->size()) {
    fail(
        "{}: the data position {} is past the {} examples of an epoch (did the data change since "
        "the checkpoint?)",
        dataset_->what(), state.position, dataset_->size());
  }
  if (state.epoch != state_.epoch) build_order(state.epoch);
  state_ = state;
}

Sampler::Sampler(const ExampleSource& dataset, int micro_batch_size, int seq_len, bool shuffle,
                 uint64_t seed, int rank, int world_size, int rows_per_example)
    : OrderedSampler(dataset, micro_batch_size, seq_len, shuffle, seed, rank, world_size,
                     rows_per_example) {
  batches_per_epoch_ = static_cast<int64_t>(
      dataset.size() /
      (static_cast<size_t>(world_size) * static_cast<size_t>(micro_batch_size / rows_per_example)));
  if (batches_per_epoch_ == 0) {
    fail("{}: {} examples are too few for micro_batch_size {}{} on each of {} ranks",
         dataset.what(), dataset.size(), micro_batch_size,
         rows_per_example > 1 ? fmt::format(" ({} rows an example)", rows_per_example) : "",
         world_size);
  }
}

void fill_row(Batch& out, int b, ExampleView ex) {
  const int T = out.T;
  const int len = static_cast<int>(std::min(ex.input_ids.size(), static_cast<size_t>(T)));
  const size_t row = static_cast<size_t>(b) * T;
  for (int t = 0; t < len; ++t) {
    out.input_ids[row + t] = ex.input_ids[t];
    out.positions[row + t] = t;
  }
  // HF causal-LM shift: position t predicts token t+1; the last kept token predicts nothing.
  for (int t = 0; t + 1 < len; ++t) out.targets[row + t] = ex.labels[t + 1];
}

void fill_example_rows(Batch& out, int b, ExampleView ex, int rows, int64_t index) {
  for (int i = 0; i < rows; ++i) out.examples[static_cast<size_t>(b + i)] = index;
  if (rows == 1) {
    fill_row(out, b, ex);
    return;
  }
  KILN_CHECK(rows == 2, "{} rows per example", rows);
  const auto [chosen, rejected] = pair_sequences(ex);
  fill_row(out, b, chosen);
  fill_row(out, b + 1, rejected);
}

void Sampler::next(Batch& out) {
  const int per_rank = micro_batch_size_ / rows_per_example_;  // examples of each rank
  const size_t group = static_cast<size_t>(per_rank) * static_cast<size_t>(world_size_);
  if (state_.position + group > dataset_->size()) {  // the rest of the epoch fills no batch
    build_order(state_.epoch + 1);
    state_ = {state_.epoch + 1, 0};
  }
  out.resize(micro_batch_size_, seq_len_);
  for (int k = 0; k < per_rank; ++k) {
    // Example k of this rank is the group's example g = k * W + rank.
    const size_t g = static_cast<size_t>(k) * world_size_ + static_cast<size_t>(rank_);
    const size_t e = order_[state_.position + g];
    fill_example_rows(out, k * rows_per_example_, dataset_->example(e), rows_per_example_,
                      static_cast<int64_t>(e));
  }
  state_.position += group;
}

}  // namespace kiln
