#include "kiln/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/base/log.h"
#include "kiln/data/sampler.h"
#include "kiln/data/token_dataset.h"
#include "kiln/dist/communicator.h"
#include "kiln/model/hf_checkpoint.h"
#include "kiln/model/qwen2.h"
#include "kiln/train/optimizer.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

// Appends one JSON object per line and flushes it, so a crash loses at most the line in flight.
class MetricsWriter {
 public:
  explicit MetricsWriter(const fs::path& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "w");
    if (f_ == nullptr) fail("{}: cannot open for writing", path.string());
  }
  ~MetricsWriter() {
    if (f_) std::fclose(f_);
  }
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const Json& j) {
    const std::string line = j.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0) {
      fail("{}: write failed", path_.string());
    }
  }

 private:
  fs::path path_;
  std::FILE* f_ = nullptr;
};

}  // namespace

fs::path final_model_dir(const fs::path& run_dir) { return run_dir / "final"; }

TrainResult train(const Recipe& r, const std::function<void(const StepMetrics&)>& on_step) {
  auto comm = make_local_communicator();
  const fs::path run_dir = r.output.dir;
  fs::create_directories(run_dir);
  write_file_atomic(run_dir / "recipe.yaml", recipe_to_yaml(r));

  const fs::path model_path = r.model.path;
  const Qwen2Config config = read_config(model_path / "config.json");
  Qwen2Model model(config, cpu_backend());
  ParamStore store(model.layout());
  load_hf_weights(model_path, model.layout(), store);
  KILN_LOG_INFO("model {}: {:.1f}M parameters, {} layers, hidden {}", model_path.string(),
                parameter_count(config) / 1e6, config.num_hidden_layers, config.hidden_size);

  if (r.data.format != "tokens") fail("data.format '{}' is not supported yet", r.data.format);
  TokenDataset data = TokenDataset::load(r.data.train, config.vocab_size, r.data.seq_len);
  KILN_LOG_INFO("data {}: {} examples, {} tokens, {} truncated to seq_len {}", r.data.train,
                data.size(), data.num_tokens(), data.num_truncated(), r.data.seq_len);
  Sampler sampler(data, r.train.micro_batch_size, r.data.seq_len, r.data.shuffle, r.train.seed,
                  comm->rank(), comm->world_size());

  OptimizerSettings os;
  os.name = r.optimizer.name;
  os.weight_decay = r.optimizer.weight_decay;
  os.beta1 = r.optimizer.betas[0];
  os.beta2 = r.optimizer.betas[1];
  os.eps = r.optimizer.eps;
  os.momentum = r.optimizer.momentum;
  std::vector<ShardRange> shards;
  for (const auto& u : model.layout().units()) shards.push_back({0, u.numel});
  Optimizer opt(os, model.layout(), shards);
  const ScheduleSettings ss{r.schedule.name, r.schedule.warmup_steps, r.schedule.min_lr_ratio};

  MetricsWriter metrics(run_dir / "metrics.jsonl");
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  const int accum = r.train.grad_accum_steps;
  std::vector<Batch> batches(accum);
  TrainResult result;
  const auto t_start = Clock::now();
  const Backend& be = cpu_backend();

  for (int64_t step = 0; step < r.train.max_steps; ++step) {
    const auto t0 = Clock::now();
    // The loss is the mean over every predicted token of the step (all micro-batches, all
    // ranks), so gradient accumulation gives the same gradient as one large batch.
    double counts[2] = {0, 0};  // targets, tokens
    for (auto& b : batches) {
      sampler.next(b);
      counts[0] += static_cast<double>(b.num_targets());
      counts[1] += static_cast<double>(b.B) * b.T;
    }
    comm->all_reduce(counts, size_t{2}, ReduceOp::kSum);
    const double targets = counts[0];
    store.zero_grads();
    double loss_sum = 0;
    if (targets > 0) {
      const float scale = static_cast<float>(1.0 / targets);
      for (const auto& b : batches) {
        loss_sum += model.forward_backward(b, store, scale, r.train.activation_checkpointing);
      }
    }
    double sums[2] = {loss_sum, 0};
    for (int u = 0; u < store.num_units(); ++u) {
      sums[1] += be.sum_squares(store.grads(u).data(), store.grads(u).size());
    }
    comm->all_reduce(sums, size_t{2}, ReduceOp::kSum);
    const double grad_norm = std::sqrt(sums[1]);
    if (!std::isfinite(grad_norm)) {
      fail("step {}: gradient norm is {} (loss {}); stopping", step + 1, grad_norm,
           sums[0] / targets);
    }
    if (r.train.grad_clip > 0 && grad_norm > r.train.grad_clip) {
      const float c = static_cast<float>(r.train.grad_clip / (grad_norm + 1e-6));
      for (int u = 0; u < store.num_units(); ++u)
        be.scale(store.grads(u).data(), c, store.grads(u).size());
    }
    const double lr = lr_at(ss, r.optimizer.lr, step, r.train.max_steps);
    opt.begin_step();
    for (int u = 0; u < store.num_units(); ++u) {
      opt.step(u, store.params(u).data(), store.grads(u).data(), lr);
    }

    StepMetrics m;
    m.step = step + 1;
    m.loss = targets > 0 ? sums[0] / targets : 0.0;
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.targets = static_cast<int64_t>(targets);
    m.tokens = static_cast<int64_t>(counts[1]);
    m.step_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    m.tokens_per_s = m.tokens / std::max(m.step_seconds, 1e-9);
    if (step == 0) result.first_loss = m.loss;
    result.last_loss = m.loss;
    result.steps = m.step;
    metrics.write(Json{{"step", m.step},
                       {"loss", m.loss},
                       {"lr", m.lr},
                       {"grad_norm", m.grad_norm},
                       {"tokens_per_s", m.tokens_per_s},
                       {"tokens", m.tokens},
                       {"targets", m.targets},
                       {"step_s", m.step_seconds},
                       {"epoch", sampler.epoch()}});
    if (on_step) on_step(m);
    const bool last = m.step == r.train.max_steps;
    if (m.step % r.train.log_every == 0 || last) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - t_start).count();
      const double eta = elapsed / m.step * (r.train.max_steps - m.step);
      const std::string line = fmt::format(
          "step {}/{} | loss {:.4f} | lr {:.3e} | grad_norm {:.3f} | {:.0f} tok/s | ETA {}", m.step,
          r.train.max_steps, m.loss, m.lr, m.grad_norm, m.tokens_per_s, format_duration(eta));
      if (tty) {
        std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), last ? "\n" : "");
      } else {
        std::fprintf(stderr, "%s\n", line.c_str());
      }
    }
  }

  result.model_dir = final_model_dir(run_dir);
  const DType out_dtype = *dtype_from_cli(r.output.dtype);
  save_hf_checkpoint(result.model_dir, config, model.layout(), store, out_dtype);
  KILN_LOG_INFO("saved {} ({})", result.model_dir.string(), r.output.dtype);
  return result;
}

}  // namespace kiln
