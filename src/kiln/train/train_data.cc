#include "kiln/train/train_data.h"

#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/data/packing_sampler.h"
#include "kiln/data/preference_pairs.h"

namespace kiln {

DataOptions data_options(const Recipe& r, const std::string& path, DataFormat format) {
  DataOptions o;
  o.path = path;
  o.format = format;
  o.tokenizer = r.data.tokenizer.empty() ? fs::path(r.model.path) : fs::path(r.data.tokenizer);
  o.seq_len = r.data.seq_len;
  o.overlong = r.data.overlong;
  o.train_on_prompt = r.data.train_on_prompt;
  o.chat_template = r.data.chat_template;
  o.enable_thinking = r.data.enable_thinking;
  o.skip_bad_lines = r.data.skip_bad_lines;
  o.cache_dir = r.data.cache_dir;
  return o;
}

DataOptions data_options(const Recipe& r, const Recipe::TrainFile& f) {
  return data_options(r, f.path, train_file_format(r, f));
}

void check_context_length(const Recipe& r, const ModelConfig& c, bool lead) {
  if (r.data.seq_len <= c.max_position_embeddings) return;
  if (!r.data.allow_long_context) {
    fail(
        "data.seq_len {} is above the model's max_position_embeddings {} ({}/config.json): lower "
        "data.seq_len, or set data.allow_long_context=true to let RoPE extrapolate past the "
        "positions the model was trained on",
        r.data.seq_len, c.max_position_embeddings, r.model.path);
  }
  if (lead) {
    KILN_LOG_WARN(
        "data.allow_long_context: data.seq_len {} is above the model's max_position_embeddings "
        "{}; RoPE extrapolates past the positions the model was trained on",
        r.data.seq_len, c.max_position_embeddings);
  }
}

std::unique_ptr<BatchSampler> make_sampler(const ExampleSource& dataset, const Recipe& r, int rank,
                                           int world_size) {
  if (r.data.pack) {
    return std::make_unique<PackingSampler>(dataset, r.train.micro_batch_size, r.data.seq_len,
                                            r.data.shuffle, r.train.seed, rank, world_size);
  }
  return std::make_unique<Sampler>(dataset, r.train.micro_batch_size, r.data.seq_len,
                                   r.data.shuffle, r.train.seed, rank, world_size,
                                   rows_per_example(r));
}

namespace {
// Micro-batches of one epoch of this rank's share.
int64_t micro_batches_per_epoch(const ExampleSource& dataset, const Recipe& r, int rank,
                                int world_size) {
  if (!r.data.pack) {
    return Sampler(dataset, r.train.micro_batch_size, r.data.seq_len, r.data.shuffle, r.train.seed,
                   rank, world_size, rows_per_example(r))
        .batches_per_epoch();
  }
  PackingSampler s(dataset, r.train.micro_batch_size, r.data.seq_len, r.data.shuffle, r.train.seed,
                   rank, world_size);
  Batch b;
  int64_t n = 0;
  // A row that takes the epoch's last examples may be topped up from the next epoch.
  while (s.state().epoch == 0) {
    s.next(b);
    ++n;
  }
  return n;
}
}  // namespace

int64_t train_steps(const Recipe& r, const ExampleSource& dataset, WorkerContext& ctx) {
  if (r.train.epochs == 0) return r.train.max_steps;
  const WorkerIdentity& id = ctx.identity();
  const int64_t per_epoch = micro_batches_per_epoch(dataset, r, id.rank, id.world_size);
  if (per_epoch == 0) {
    fail("train.epochs: rank {} has no full micro-batch of {} in an epoch (too few examples)",
         id.rank, r.train.micro_batch_size);
  }
  const int64_t accum = r.train.grad_accum_steps;
  double steps = static_cast<double>((r.train.epochs * per_epoch + accum - 1) / accum);
  ctx.comm().all_reduce(&steps, size_t{1}, ReduceOp::kMax);
  if (id.rank == 0) {
    KILN_LOG_INFO("train.epochs {}: {} micro-batches per epoch per rank, {} steps", r.train.epochs,
                  per_epoch, static_cast<int64_t>(steps));
  }
  return static_cast<int64_t>(steps);
}

std::unique_ptr<TrainData> open_train_data(const Recipe& r, int64_t vocab_size,
                                           WorkerContext& ctx) {
  const WorkerIdentity& id = ctx.identity();
  auto data = std::make_unique<TrainData>();
  const bool first = id.local_rank == 0;
  const auto load_all = [&] {
    for (const Recipe::TrainFile& f : r.data.train) {
      DataOptions o = data_options(r, f);
      o.verbose = id.rank == 0;
      data->files.push_back(load_dataset(o, vocab_size));
    }
  };
  if (first) load_all();
  ctx.comm().barrier();
  if (!first) load_all();
  std::vector<MixturePart> parts;
  for (size_t i = 0; i < data->files.size(); ++i) {
    parts.push_back({&data->files[i], r.data.train[i].weight});
  }
  data->mixture = std::make_unique<Mixture>(parts, r.data.eval_split, r.train.seed);
  const ExampleSource& examples = data->examples();
  if (examples.size() == 0) fail("data.train: {} hold no examples", examples.what());
  int64_t targets = 0;
  for (const TokenizedDataset& f : data->files) targets += f.stats().targets;
  if (targets == 0) {
    // Training on it would report loss 0 and change nothing: refused before step 1.
    fail(
        "data.train: {} examples and 0 predicted tokens in {}: every label is masked (no token "
        "takes loss; data.train_on_prompt=true trains on the prompts too)",
        examples.size(), examples.what());
  }
  if (const ExampleSource* held = data->held_out()) {
    if (held->size() == 0) {
      size_t total = 0;
      for (const TokenizedDataset& f : data->files) total += f.size();
      fail(
          "data.eval_split: {} holds out no example (each file's share of the {} rounds to 0); "
          "raise it or set data.eval",
          r.data.eval_split, total);
    }
    if (id.rank == 0) {
      KILN_LOG_INFO("data.eval_split {}: {} examples held out for evaluation, {} to train on",
                    r.data.eval_split, held->size(), examples.size());
    }
  }
  data->sampler = make_sampler(examples, r, id.rank, id.world_size);
  return data;
}

TokenizedDataset load_eval_data(const Recipe& r, int64_t vocab_size, bool verbose) {
  DataOptions o = data_options(r, r.data.eval, r.data.format);
  o.use_cache = false;
  o.verbose = verbose;
  TokenizedDataset d = load_dataset(o, vocab_size);
  if (d.size() == 0) fail("data.eval: {} holds no examples", r.data.eval);
  if (d.stats().targets == 0) {
    // An evaluation would divide by zero at the first eval step or the end: refused before step 1.
    fail("data.eval: {} has {} examples and 0 predicted tokens: every label is masked", r.data.eval,
         d.size());
  }
  return d;
}

EvalBatches::EvalBatches(const ExampleSource& data, int micro_batch_size, int rank, int world_size,
                         int64_t max_batches, int rows_per_example)
    : data_(&data),
      per_batch_(micro_batch_size / rows_per_example),
      rows_per_example_(rows_per_example),
      rank_(rank),
      world_size_(world_size) {
  KILN_CHECK(per_batch_ > 0 && micro_batch_size % rows_per_example == 0,
             "eval batches of {} rows, {} per example", micro_batch_size, rows_per_example);
  const auto n = static_cast<int64_t>(data.size());
  const int64_t batches = (n + per_batch_ - 1) / per_batch_;
  rounds_ = (batches + world_size - 1) / world_size;
  if (max_batches > 0) rounds_ = std::min(rounds_, max_batches);
}

void EvalBatches::fill(int64_t round, Batch& out) const {
  const auto n = static_cast<int64_t>(data_->size());
  const int64_t first = (round * world_size_ + rank_) * per_batch_;
  const int64_t last = std::min(n, first + per_batch_);
  if (first >= last) {
    out.resize(rows_per_example_, 2);  // nothing to predict: the forward runs for the collectives
    return;
  }
  int T = 2;
  for (int64_t i = first; i < last; ++i) {
    const ExampleView ex = data_->example(static_cast<size_t>(i));
    if (rows_per_example_ == 1) {
      T = std::max(T, static_cast<int>(ex.size()));
    } else {
      const auto [chosen, rejected] = pair_sequences(ex);
      T = std::max({T, static_cast<int>(chosen.size()), static_cast<int>(rejected.size())});
    }
  }
  out.resize(static_cast<int>(last - first) * rows_per_example_, T);
  for (int64_t i = first; i < last; ++i) {
    fill_example_rows(out, static_cast<int>(i - first) * rows_per_example_,
                      data_->example(static_cast<size_t>(i)), rows_per_example_, i);
  }
}

}  // namespace kiln
