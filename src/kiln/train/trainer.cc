#include "kiln/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "kiln/base/error.h"
#include "kiln/base/fault.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/base/log.h"
#include "kiln/data/sampler.h"
#include "kiln/data/token_dataset.h"
#include "kiln/distributed/communicator.h"
#include "kiln/distributed/fsdp.h"
#include "kiln/model/hf_checkpoint.h"
#include "kiln/model/hf_model_files.h"
#include "kiln/model/qwen2.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/optimizer.h"
#include "kiln/train/run_meta.h"
#include "kiln/train/tensorboard.h"
#include "kiln/train/train_data.h"

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

// Peak resident set size of this process (VmHWM).
size_t peak_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kb = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "VmHWM: %zu kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb * 1024;
}

// Appends one JSON object per line and flushes it, so a crash loses at most the line in flight.
class MetricsWriter {
 public:
  // A resumed run keeps the rows of the steps it resumes after and drops later ones (steps
  // that will be trained again).
  MetricsWriter(const fs::path& path, int64_t keep_through_step) : path_(path) {
    std::string kept;
    if (keep_through_step > 0 && fs::exists(path)) {
      std::istringstream in(read_file(path));
      for (std::string line; std::getline(in, line);) {
        try {
          if (parse_json(line, path.string()).at("step").get<int64_t>() <= keep_through_step) {
            kept += line + "\n";
          }
        } catch (const std::exception&) {
          // a torn last line from a crash
        }
      }
    }
    f_ = std::fopen(path.c_str(), "w");
    if (f_ == nullptr) fail("{}: cannot open for writing", path.string());
    if (!kept.empty()) std::fwrite(kept.data(), 1, kept.size(), f_);
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
  WorkerContext ctx;
  ctx.comm = comm.get();
  return train(r, ctx, on_step);
}

TrainResult train(const Recipe& r, WorkerContext& ctx,
                  const std::function<void(const StepMetrics&)>& on_step) {
  Communicator& world = *ctx.comm;
  const bool lead = ctx.rank == 0;
  const fs::path run_dir = r.output.dir;
  const bool has_eval = !r.data.eval.empty();
  if (r.checkpoint.keep_best > 0 && r.checkpoint.best_metric == "eval_loss" && !has_eval) {
    fail(
        "checkpoint.keep_best: {} keeps checkpoints by eval_loss, but data.eval is not set (set "
        "data.eval or checkpoint.best_metric=loss)",
        r.checkpoint.keep_best);
  }
  if (lead) {
    fs::create_directories(run_dir);
    write_file_atomic(run_dir / "recipe.yaml", recipe_to_yaml(r));
  }

  const fs::path model_path = r.model.path;
  const Qwen2Config config = read_config(model_path / "config.json");
  Qwen2Model model(config, cpu_backend_for(r.train.dtype));
  const ParamLayout& layout = model.layout();

  // One process needs no sharding; otherwise the recipe's strategy over the right groups.
  const ShardStrategy strategy =
      ctx.world_size == 1 ? ShardStrategy::kNoShard : parse_strategy(r.dist.strategy);
  Communicator& shard_group = strategy == ShardStrategy::kHybridShard ? ctx.intra_node() : world;
  Communicator* replica_group =
      strategy == ShardStrategy::kHybridShard ? &ctx.inter_node() : nullptr;
  Fsdp fsdp(layout, strategy, shard_group, replica_group, r.dist.prefetch);
  // Transports into run_meta.json and the log; a dist.require_transport mismatch stops here.
  record_run_start(r, ctx, strategy_name(strategy));
  {
    // Unit by unit: memory bounded by one whole unit, each rank keeps its shard.
    HfWeightsReader reader(model_path, layout);
    for (int u = 0; u < layout.num_units(); ++u) {
      Buffer<float> full(layout.units()[u].numel);
      reader.read_unit(u, full.data());
      fsdp.load_unit(u, full.data());
    }
  }
  if (lead) {
    KILN_LOG_INFO("model {}: {:.1f}M parameters, {} layers, hidden {}; {} worker(s), {} ({})",
                  model_path.string(), parameter_count(config) / 1e6, config.num_hidden_layers,
                  config.hidden_size, ctx.world_size, strategy_name(strategy), world.transport());
  }

  // Every rank reads its own disjoint share of each epoch (the data is tokenized, or its cache
  // mapped, by the first worker of each node first; the loader logs the counts).
  const std::unique_ptr<TrainData> data = open_train_data(r, config.vocab_size, ctx);
  BatchSampler& sampler = *data->sampler;
  const int64_t max_steps = train_steps(r, data->dataset, ctx);  // train.max_steps or epochs
  // Held-out data: every rank loads it (no cache files) and evaluates its share.
  std::optional<TokenizedDataset> eval_data;
  std::optional<EvalBatches> eval_batches;
  if (has_eval) {
    eval_data.emplace(load_eval_data(r, config.vocab_size, lead));
    eval_batches.emplace(*eval_data, r.train.micro_batch_size, ctx.rank, ctx.world_size,
                         r.eval.max_batches);
    if (lead) {
      KILN_LOG_INFO("data.eval {}: {} examples, {} batch(es) of {} per rank per evaluation",
                    r.data.eval, eval_data->size(), eval_batches->rounds(),
                    r.train.micro_batch_size);
    }
  }

  OptimizerSettings os;
  os.name = r.optimizer.name;
  os.weight_decay = r.optimizer.weight_decay;
  os.beta1 = r.optimizer.betas[0];
  os.beta2 = r.optimizer.betas[1];
  os.eps = r.optimizer.eps;
  os.momentum = r.optimizer.momentum;
  const std::vector<ShardRange> shards = fsdp.shard_ranges();
  Optimizer opt(os, layout, shards);
  const ScheduleSettings ss{r.schedule.name, r.schedule.warmup_steps, r.schedule.min_lr_ratio};

  // Checkpoints: under no_shard every rank holds everything, under hybrid_shard every node
  // does; only one copy of each shard is written.
  const fs::path ckpt_root = run_dir / "checkpoints";
  const bool write_shard = strategy == ShardStrategy::kNoShard       ? ctx.rank == 0
                           : strategy == ShardStrategy::kHybridShard ? ctx.node_rank == 0
                                                                     : true;
  const std::string recipe_yaml = recipe_to_yaml(r);
  auto checkpoint_state = [&](int64_t step, double loss, std::optional<double> eval_loss) {
    CheckpointState st;
    st.step = step;
    st.sampler = sampler.state();
    st.strategy = strategy_name(strategy);
    st.recipe_yaml = recipe_yaml;
    st.metrics = {{"loss", loss}};
    if (eval_loss) st.metrics["eval_loss"] = *eval_loss;
    st.hf_files = {model_path, r.data.tokenizer};
    return st;
  };
  RetentionPolicy retention;
  retention.keep_last = static_cast<int>(r.checkpoint.keep_last);
  retention.keep_best = static_cast<int>(r.checkpoint.keep_best);
  retention.best_metric = r.checkpoint.best_metric;
  retention.maximize = r.checkpoint.best_mode == "max";
  CheckpointSaver saver(ckpt_root, layout, fsdp, opt, world, write_shard, r.checkpoint.background,
                        retention);

  // Forward only, through FSDP's gathered units: the mean loss over every eval target of every
  // rank.
  auto evaluate = [&](int64_t step) {
    double sums[2] = {0, 0};  // loss, targets
    Batch b;
    for (int64_t i = 0; i < eval_batches->rounds(); ++i) {
      eval_batches->fill(i, b);
      sums[0] += model.forward(b, fsdp);
      sums[1] += static_cast<double>(b.num_targets());
      fsdp.finish_backward();  // the next batch prefetches from the start again
    }
    world.all_reduce(sums, size_t{2}, ReduceOp::kSum);
    if (sums[1] == 0) {
      fail("step {}: data.eval {} has no predicted tokens (every label masked?)", step,
           r.data.eval);
    }
    return sums[0] / sums[1];
  };
  int64_t start_step = 0;
  if (r.train.resume != "none") {
    std::optional<fs::path> from;
    if (r.train.resume == "auto") {
      if (auto latest = latest_checkpoint(ckpt_root)) from = latest->dir;
    } else {
      from = fs::path(r.train.resume);
    }
    if (from) {
      const CheckpointState st = load_checkpoint(*from, layout, fsdp, opt);
      sampler.restore(st.sampler);
      start_step = st.step;
      if (lead) KILN_LOG_INFO("resumed from {} (step {})", from->string(), st.step);
    } else if (lead) {
      KILN_LOG_INFO("train.resume=auto: no checkpoint in {}, starting fresh", ckpt_root.string());
    }
  }

  std::unique_ptr<MetricsWriter> metrics;
  if (lead) metrics = std::make_unique<MetricsWriter>(run_dir / "metrics.jsonl", start_step);
  std::unique_ptr<TensorBoardWriter> tensorboard;
  if (lead && r.output.tensorboard) {
    tensorboard = std::make_unique<TensorBoardWriter>(run_dir / "tensorboard");
  }
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  const int accum = r.train.grad_accum_steps;
  std::vector<Batch> batches(accum);
  TrainResult result;
  const auto t_start = Clock::now();
  std::optional<double> final_eval_loss;
  const Backend& be = cpu_backend_for(r.train.dtype);

  for (int64_t step = start_step; step < max_steps; ++step) {
    ctx.begin_step(step + 1);  // hang reports and KILN_FAULT name the step
    const auto t0 = Clock::now();
    // The loss is the mean over every predicted token of the step (all micro-batches, all
    // ranks), so accumulation and data parallelism give the same gradient as one large batch.
    // A background checkpoint write rides on the same all-reduce: {still running, failed}.
    const auto ckpt = saver.status();
    double counts[4] = {0, 0, ckpt[0], ckpt[1]};  // targets, tokens, writes running, failed
    for (auto& b : batches) {
      sampler.next(b);
      counts[0] += static_cast<double>(b.num_targets());
      counts[1] += static_cast<double>(b.B) * b.T;
    }
    world.all_reduce(counts, size_t{4}, ReduceOp::kSum);
    saver.on_status(counts[2], counts[3]);  // commits (or fails) once every rank is done
    const double targets = counts[0];
    fsdp.zero_grads();
    double loss_sum = 0;
    if (targets > 0) {
      const float scale = static_cast<float>(1.0 / targets);
      for (int i = 0; i < accum; ++i) {
        fsdp.set_sync_grads(i == accum - 1);
        loss_sum +=
            model.forward_backward(batches[i], fsdp, scale, r.train.activation_checkpointing);
        fsdp.finish_backward();
      }
    }
    world.all_reduce(&loss_sum, size_t{1}, ReduceOp::kSum);
    const double grad_norm = std::sqrt(fsdp.grad_sq_norm(be));
    if (!std::isfinite(grad_norm)) {
      fail("step {}: gradient norm is {} (loss {}); stopping", step + 1, grad_norm,
           loss_sum / targets);
    }
    if (r.train.grad_clip > 0 && grad_norm > r.train.grad_clip) {
      fsdp.scale_grads(be, static_cast<float>(r.train.grad_clip / (grad_norm + 1e-6)));
    }
    const double lr = lr_at(ss, r.optimizer.lr, step, max_steps);
    opt.begin_step();
    for (int u = 0; u < fsdp.num_units(); ++u) {
      opt.step(u, fsdp.shard_params(u), fsdp.shard_grads(u), lr);
    }

    StepMetrics m;
    m.step = step + 1;
    m.loss = targets > 0 ? loss_sum / targets : 0.0;
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.targets = static_cast<int64_t>(targets);
    m.tokens = static_cast<int64_t>(counts[1]);
    m.step_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    m.tokens_per_s = m.tokens / std::max(m.step_seconds, 1e-9);
    if (step == start_step) result.first_loss = m.loss;
    result.last_loss = m.loss;
    result.steps = m.step;
    if (on_step) on_step(m);
    const bool last = m.step == max_steps;
    std::optional<double> eval_loss;
    if (has_eval && (last || (r.eval.every_steps > 0 && m.step % r.eval.every_steps == 0))) {
      eval_loss = evaluate(m.step);
    }
    if (last) final_eval_loss = eval_loss;
    if (r.checkpoint.every_steps > 0 && m.step % r.checkpoint.every_steps == 0 && !last) {
      saver.save(checkpoint_state(m.step, m.loss, eval_loss));
    }
    if (!lead) continue;
    const Json row{{"step", m.step},
                   {"loss", m.loss},
                   {"lr", m.lr},
                   {"grad_norm", m.grad_norm},
                   {"tokens_per_s", m.tokens_per_s},
                   {"tokens", m.tokens},
                   {"targets", m.targets},
                   {"step_s", m.step_seconds},
                   {"epoch", sampler.epoch()}};
    Json full_row = row;
    if (eval_loss) full_row["eval_loss"] = *eval_loss;
    full_row["peak_rss_mib"] = peak_rss_bytes() / 1048576.0;
    metrics->write(full_row);
    if (tensorboard) tensorboard->write_row(m.step, full_row);
    ctx.report(full_row);
    if (m.step % r.train.log_every == 0 || last || eval_loss) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - t_start).count();
      const double eta = elapsed / m.step * (max_steps - m.step);
      const std::string line = fmt::format(
          "step {}/{} | loss {:.4f}{} | lr {:.3e} | grad_norm {:.3f} | {:.0f} tok/s | ETA {}",
          m.step, max_steps, m.loss,
          eval_loss ? fmt::format(" | eval_loss {:.4f}", *eval_loss) : std::string(), m.lr,
          m.grad_norm, m.tokens_per_s, format_duration(eta));
      if (tty) {
        // Lines with an evaluation stay on screen.
        std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), last || eval_loss ? "\n" : "");
      } else {
        std::fprintf(stderr, "%s\n", line.c_str());
      }
    }
  }

  {
    // Memory figures per rank: what sharding saves is visible in every run's log.
    size_t opt_bytes = 0;
    for (int u = 0; u < fsdp.num_units(); ++u) {
      opt_bytes += (opt.m(u).size() + opt.v(u).size()) * sizeof(float);
    }
    KILN_LOG_INFO(
        "rank {}: peak RSS {:.0f} MiB; sharded params+grads {:.0f} MiB, optimizer state {:.0f} "
        "MiB, peak gathered units {:.0f} MiB, activations {:.0f} MiB",
        ctx.rank, peak_rss_bytes() / 1048576.0, fsdp.shard_bytes() / 1048576.0,
        opt_bytes / 1048576.0, fsdp.peak_gathered_bytes() / 1048576.0,
        model.activation_bytes() / 1048576.0);
  }

  // The final state as a sharded checkpoint (no rank gathers the model), then rank 0 streams it
  // unit by unit into final/ in Hugging Face layout.
  // A background save still in flight is committed first; the last one is written at once.
  saver.flush();
  if (has_eval && !final_eval_loss) final_eval_loss = evaluate(max_steps);  // resumed at the end
  saver.save(checkpoint_state(max_steps, result.last_loss, final_eval_loss),
             /*sync=*/true);
  const fs::path last_ckpt = saver.last_committed();
  result.model_dir = final_model_dir(run_dir);
  if (lead) {
    CheckpointUnitReader reader(last_ckpt, layout);
    const DType out_dtype = *dtype_from_cli(r.output.dtype);
    save_hf_model_dir(
        result.model_dir, {model_path, r.data.tokenizer}, layout,
        [&](int u, float* out) { reader.read_unit(u, out); }, out_dtype);
    KILN_LOG_INFO("saved {} ({}) from {}", result.model_dir.string(), r.output.dtype,
                  last_ckpt.string());
  }
  world.barrier();
  return result;
}

}  // namespace kiln
