// A recipe's training data on one worker: the dataset (data.format, through the tokenized cache)
// and its sampler (packed or not, this rank's share, seeded by train.seed).
#pragma once

#include <cstdint>
#include <memory>

#include "kiln/data/mixture.h"
#include "kiln/data/sampler.h"
#include "kiln/data/text_dataset.h"
#include "kiln/model/config.h"
#include "kiln/train/recipe.h"
#include "kiln/train/runtime.h"

namespace kiln {

// load_dataset's options for the recipe's data section (data.tokenizer defaults to model.path)
// for `path` in `format`.
DataOptions data_options(const Recipe& recipe, const std::string& path, DataFormat format);
// The same for a data.train entry, in its own format or data.format.
DataOptions data_options(const Recipe& recipe, const Recipe::TrainFile& file);

// data.train's files (one or several, each through its own cache, in its own format) read as one
// weighted dataset, less data.eval_split's held-out examples (data/mixture.h).
struct TrainData {
  std::vector<TokenizedDataset> files;    // one per data.train entry, in order
  std::unique_ptr<Mixture> mixture;       // reads `files`
  std::unique_ptr<BatchSampler> sampler;  // reads examples()
  const ExampleSource& examples() const { return mixture->train(); }
  // data.eval_split's examples; nullptr when it is 0.
  const ExampleSource* held_out() const { return mixture->held_out(); }
};

// Rows of a micro-batch each example fills: 2 under a dpo section (a preference pair's chosen
// and rejected sequences: data/preference_pairs.h), else 1.
inline int rows_per_example(const Recipe& recipe) { return recipe.dpo ? 2 : 1; }

// The sampler of data.pack over `dataset` for rank `rank` of `world_size`.
std::unique_ptr<BatchSampler> make_sampler(const ExampleSource& dataset, const Recipe& recipe,
                                           int rank, int world_size);

// data.seq_len against the model's max_position_embeddings: above it is an error naming both,
// unless data.allow_long_context (then rank 0 (`lead`) warns that RoPE extrapolates).
void check_context_length(const Recipe& recipe, const ModelConfig& config, bool lead);

// Optimizer steps to run: train.max_steps, or with train.epochs > 0 the steps that cover that
// many epochs of this rank's share (micro-batches per epoch: the sampler's full batches unpacked;
// packed, the rows a fresh sampler fills before it starts the next epoch), rounded up to whole
// steps; the largest over the ranks (collective over ctx.comm()), so every rank runs the same.
int64_t train_steps(const Recipe& recipe, const ExampleSource& dataset, WorkerContext& ctx);

// Collective over ctx.comm(): the first worker of each node loads (building the cache if needed)
// while the others wait, then they load it, so the data is tokenized once per node.
std::unique_ptr<TrainData> open_train_data(const Recipe& recipe, int64_t vocab_size,
                                           WorkerContext& ctx);

// data.eval in data.format, tokenized with data.train's settings (tokenizer, seq_len, overlong,
// train_on_prompt); no cache files are written (evaluation sets are small).
TokenizedDataset load_eval_data(const Recipe& recipe, int64_t vocab_size, bool verbose);

// One rank's evaluation batches: consecutive examples in file order, micro_batch_size rows per
// batch (rows_per_example rows each example: sampler.h's fill_example_rows; rows as long as the
// batch's longest sequence), global batch k on rank k % world_size, at most max_batches (> 0) per
// rank. Every rank runs rounds() batches, the same number (each forward is collective under
// FSDP); a rank without a batch in a round gets an empty one (rows_per_example rows, no targets).
class EvalBatches {
 public:
  EvalBatches(const ExampleSource& data, int micro_batch_size, int rank, int world_size,
              int64_t max_batches, int rows_per_example = 1);
  int64_t rounds() const { return rounds_; }
  void fill(int64_t round, Batch& out) const;

 private:
  const ExampleSource* data_;
  int per_batch_ = 1, rows_per_example_ = 1, rank_ = 0, world_size_ = 1;  // examples, rows
  int64_t rounds_ = 0;
};

}  // namespace kiln
