// A recipe's training data on one worker: the dataset (data.format, through the tokenized cache)
// and its sampler (packed or not, this rank's share, seeded by train.seed).
#pragma once

#include <cstdint>
#include <memory>

#include "kiln/data/sampler.h"
#include "kiln/data/text_dataset.h"
#include "kiln/train/recipe.h"
#include "kiln/train/runtime.h"

namespace kiln {

// load_dataset's options for the recipe's data section (data.tokenizer defaults to model.path).
DataOptions data_options(const Recipe& recipe);

struct TrainData {
  TokenizedDataset dataset;
  std::unique_ptr<BatchSampler> sampler;  // reads `dataset`
};

// The sampler of data.pack over `dataset` for rank `rank` of `world_size`.
std::unique_ptr<BatchSampler> make_sampler(const ExampleSource& dataset, const Recipe& recipe,
                                           int rank, int world_size);

// Collective over ctx.comm: the first worker of each node loads (building the cache if needed)
// while the others wait, then they load it, so the data is tokenized once per node.
std::unique_ptr<TrainData> open_train_data(const Recipe& recipe, int64_t vocab_size,
                                           WorkerContext& ctx);

}  // namespace kiln
