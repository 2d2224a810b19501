// Rank-sharded, seeded, resumable micro-batch samplers: one example per row (Sampler, here) or
// several packed into each row (PackingSampler, packing_sampler.h), behind one interface.
//
// Each epoch visits the examples in one order, shared by every rank: the identity, or a
// permutation drawn from (seed, epoch) by splitmix64 + Fisher-Yates, so the order depends on
// nothing but those two numbers (not on the standard library's distributions). The group reads
// that order front to back: one micro-batch of every rank together takes the next B * W examples
// (rows of the group numbered g = b * W + r for row b of rank r; B / 2 * W preference pairs, two
// rows each), so where the group is is one
// position in the epoch's order, the same on every rank. A checkpoint records it, and a run
// resumed on any number of ranks continues from that very example. Unpacked, row g takes the
// example at position + g, and when fewer than B * W examples are left the rest of the epoch is
// skipped, so a fresh epoch has
//   batches_per_epoch = floor(N / (W * B))
// full micro-batches on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/data/batch.h"
#include "kiln/data/example_source.h"
#include "kiln/data/token_dataset.h"

namespace kiln {

// Where the group is; saved with a checkpoint so a resumed run, on any number of ranks, continues
// with the next example of the same order.
struct SamplerState {
  uint64_t epoch = 0;  // the current epoch, from 0
  // Examples of the epoch's order the group has taken (or skipped), in [0, N]: the same on every
  // rank, whatever the world size.
  uint64_t position = 0;
  bool operator==(const SamplerState&) const = default;
};

// What the trainer draws micro-batches from.
class BatchSampler {
 public:
  virtual ~BatchSampler() = default;
  // Fills `out` with the next micro-batch (B = micro_batch_size rows of T = seq_len), moving to
  // the next epoch when this one is used up.
  virtual void next(Batch& out) = 0;
  virtual SamplerState state() const = 0;
  // Continues from a state() of a sampler over the same dataset, seed and shuffling (any batch
  // size, rank and world size). Throws kiln::Error if the position is past the end of an epoch
  // (the dataset changed).
  virtual void restore(const SamplerState& state) = 0;
  virtual uint64_t epoch() const = 0;
};

// The visiting order of `epoch` for n examples: a permutation of 0..n-1 that depends only on
// (n, seed, epoch).
std::vector<size_t> epoch_permutation(size_t n, uint64_t seed, uint64_t epoch);

// Writes `ex` (truncated to out.T) into row b of a freshly resized batch: ids, positions from 0,
// and the HF causal-LM shifted targets. Padding keeps its defaults (id 0, no target).
void fill_row(Batch& out, int b, ExampleView ex);
inline void fill_row(Batch& out, int b, const Example& ex) { fill_row(out, b, ex.view()); }

// Writes example `ex` (the dataset's example `index`, into out.examples) into rows [b, b + rows)
// with fill_row: rows 1, the example; rows 2, a preference pair (data/preference_pairs.h), its
// chosen sequence in row b and its rejected one in row b + 1.
void fill_example_rows(Batch& out, int b, ExampleView ex, int rows, int64_t index = -1);

// What both samplers share: the dataset they draw from, the micro-batch's shape, this rank's
// place in the group, and the epoch's visiting order with the group's position in it.
class OrderedSampler : public BatchSampler {
 public:
  SamplerState state() const override { return state_; }
  // Throws kiln::Error naming the dataset when `state` is past the end of an epoch.
  void restore(const SamplerState& state) override;
  uint64_t epoch() const override { return state_.epoch; }

 protected:
  // `dataset` must outlive the sampler. KILN_CHECKs the shape and the rank; the order is epoch
  // 0's. rows_per_example: 1, or 2 for preference pairs (fill_example_rows), which
  // micro_batch_size must be a multiple of.
  OrderedSampler(const ExampleSource& dataset, int micro_batch_size, int seq_len, bool shuffle,
                 uint64_t seed, int rank, int world_size, int rows_per_example = 1);
  // The visiting order of `epoch` into order_: epoch_permutation when shuffling, else 0..N-1
  // (kept across epochs).
  void build_order(uint64_t epoch);

  const ExampleSource* dataset_;
  int micro_batch_size_;
  int seq_len_;
  bool shuffle_;
  uint64_t seed_;
  int rank_;
  int world_size_;
  int rows_per_example_;
  SamplerState state_;
  std::vector<size_t> order_;  // (N) the current epoch's visiting order
};

class Sampler : public OrderedSampler {
 public:
  // `dataset` must outlive the sampler. Throws kiln::Error if the dataset has too few examples to
  // give each of the world_size ranks one batch of micro_batch_size.
  Sampler(const ExampleSource& dataset, int micro_batch_size, int seq_len, bool shuffle,
          uint64_t seed, int rank = 0, int world_size = 1, int rows_per_example = 1);

  // Fills `out` with the next micro-batch, B = micro_batch_size rows of T = seq_len, moving to the
  // next epoch when this one is used up. Each example fills rows_per_example rows (a preference
  // pair two: the group's examples numbered k * W + r for example k of rank r, its rows
  // [2k, 2k + 1]). Row b holds example e truncated to len = min(|e|, T):
  //   input_ids[t] = e.input_ids[t], positions[t] = t             for t < len; 0 beyond
  //   targets[t]   = e.labels[t+1]                                 for t < len-1
  //   targets[t]   = kIgnoreIndex                                  for t >= len-1
  //   doc_start    = 0 everywhere (one document per row)
  void next(Batch& out) override;

  // Full micro-batches of a fresh epoch on every rank.
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

 private:
  int64_t batches_per_epoch_;
};

}  // namespace kiln
