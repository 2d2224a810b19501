#include "kiln/train/train_data.h"

#include "kiln/base/error.h"
#include "kiln/data/packing_sampler.h"

namespace kiln {

DataOptions data_options(const Recipe& r) {
  DataOptions o;
  o.path = r.data.train;
  const auto format = parse_data_format(r.data.format);
  KILN_CHECK(format.has_value(), "data.format '{}'", r.data.format);
  o.format = *format;
  o.tokenizer = r.data.tokenizer.empty() ? fs::path(r.model.path) : fs::path(r.data.tokenizer);
  o.seq_len = r.data.seq_len;
  const auto overlong = parse_overlong(r.data.overlong);
  KILN_CHECK(overlong.has_value(), "data.overlong '{}'", r.data.overlong);
  o.overlong = *overlong;
  o.train_on_prompt = r.data.train_on_prompt;
  o.skip_bad_lines = r.data.skip_bad_lines;
  o.cache_dir = r.data.cache_dir;
  return o;
}

std::unique_ptr<BatchSampler> make_sampler(const ExampleSource& dataset, const Recipe& r, int rank,
                                           int world_size) {
  if (r.data.pack) {
    return std::make_unique<PackingSampler>(dataset, r.train.micro_batch_size, r.data.seq_len,
                                            r.data.shuffle, r.train.seed, rank, world_size);
  }
  return std::make_unique<Sampler>(dataset, r.train.micro_batch_size, r.data.seq_len,
                                   r.data.shuffle, r.train.seed, rank, world_size);
}

std::unique_ptr<TrainData> open_train_data(const Recipe& r, int64_t vocab_size,
                                           WorkerContext& ctx) {
  DataOptions o = data_options(r);
  auto data = std::make_unique<TrainData>();
  const bool first = ctx.local_rank == 0;
  o.verbose = ctx.rank == 0;
  if (first) data->dataset = load_dataset(o, vocab_size);
  ctx.comm->barrier();
  if (!first) data->dataset = load_dataset(o, vocab_size);
  data->sampler = make_sampler(data->dataset, r, ctx.rank, ctx.world_size);
  return data;
}

}  // namespace kiln
