#include "kiln/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "kiln/base/error.h"

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
                 uint64_t seed, int rank, int world_size)
    : OrderedSampler(dataset, micro_batch_size, seq_len, shuffle, seed, rank, world_size) {
  batches_per_epoch_ = static_cast<int64_t>(
      dataset.size() / (static_cast<size_t>(world_size) * static_cast<size_t>(micro_batch_size)));
  if (batches_per_epoch_ == 0) {
    fail("{}: {} examples are too few for micro_batch_size {} on each of {} ranks", dataset.what(),
         dataset.size(), micro_batch_size, world_size);
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

void Sampler::next(Batch& out) {
  const size_t group = static_cast<size_t>(micro_batch_size_) * static_cast<size_t>(world_size_);
  if (state_.position + group > dataset_->size()) {  // the rest of the epoch fills no batch
    build_order(state_.epoch + 1);
    state_ = {state_.epoch + 1, 0};
  }
  const int B = micro_batch_size_, T = seq_len_;
  out.resize(B, T);
  for (int b = 0; b < B; ++b) {
    // Row b of this rank is the group's row g = b * W + rank.
    const size_t g = static_cast<size_t>(b) * world_size_ + static_cast<size_t>(rank_);
    fill_row(out, b, dataset_->example(order_[state_.position + g]));
  }
  state_.position += group;
}

}  // namespace kiln
