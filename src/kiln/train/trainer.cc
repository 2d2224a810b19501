#include "kiln/train/trainer.h"

#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "kiln/base/error.h"
#include "kiln/base/fault.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/base/log.h"
#include "kiln/base/process_memory.h"
#include "kiln/comm/communicator.h"
#include "kiln/data/mixture.h"
#include "kiln/data/sampler.h"
#include "kiln/data/token_dataset.h"
#include "kiln/fsdp/fsdp.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/kernels/device/device_buffer.h"
#include "kiln/kernels/device/gpu_assignment.h"
#include "kiln/model/decoder.h"
#include "kiln/model/init.h"
#include "kiln/model/layout.h"
#include "kiln/model/phase_costs.h"
#include "kiln/model_files/base_fingerprint.h"
#include "kiln/model_files/hf_checkpoint.h"
#include "kiln/model_files/hf_model_files.h"
#include "kiln/model_files/lora_units.h"
#include "kiln/model_files/model_output.h"
#include "kiln/model_files/peft_adapter.h"
#include "kiln/tensor/buffer.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/checkpoint_verify.h"
#include "kiln/train/memory_plan.h"
#include "kiln/train/optimizer.h"
#include "kiln/train/preflight.h"
#include "kiln/train/reference_table.h"
#include "kiln/train/resume_checks.h"
#include "kiln/train/run_identity.h"
#include "kiln/train/run_meta.h"
#include "kiln/train/run_shape.h"
#include "kiln/train/step_sync.h"
#include "kiln/train/tensorboard.h"
#include "kiln/train/train_core.h"
#include "kiln/train/train_data.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

// "the prediction was 12.3% above the measured peak" (or "below", or "the prediction matches
// the measured peak"): which of the two is larger, in words, so the figure cannot be read as
// the run going over its plan.
std::string prediction_error(double predicted, double measured) {
  if (measured <= 0) return "nothing measured";
  const double pct = 100.0 * (predicted - measured) / measured;
  if (std::fabs(pct) < 0.05) return "the prediction matches the measured peak";
  return fmt::format("the prediction was {:.1f}% {} the measured peak", std::fabs(pct),
                     pct > 0 ? "above" : "below");
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

}  // namespace

fs::path final_model_dir(const fs::path& run_dir) { return run_dir / "final"; }

TrainResult train(const Recipe& r, const std::function<void(const StepMetrics&)>& on_step) {
  auto comm = make_local_communicator();
  WorkerContext ctx(WorkerIdentity{}, *comm, r.output.dir);
  return train(r, ctx, on_step);
}

// One worker's training run: setup in the constructor (backend, model, FSDP, weights, data,
// optimizer, checkpoints, resume), then run(): train_step per optimizer step, evaluation,
// logging and checkpoints at their steps, and the final save. Every object the run builds has
// this one owner.
class Trainer {
 public:
  Trainer(const Recipe& r, WorkerContext& ctx);
  TrainResult run(const std::function<void(const StepMetrics&)>& on_step);

 private:
  static const Recipe& checked(const Recipe& r, const WorkerContext& ctx);
  Communicator& shard_group();
  Communicator* replica_group();
  ShardSetup shard_setup();
  ScheduleSettings schedule_settings() const;
  RetentionPolicy retention() const;
  bool writes_shard() const;

  void load_base_units(Fsdp& fsdp, const std::string& dir);
  void prepare_reference_table();
  void fill_reference_table(const ExampleSource& pairs, bool eval);
  void load_weights();
  void load_adapters();
  void log_model() const;
  void open_eval_data();
  void resume();
  void claim_run_dir();
  void finish_finished_run(TrainResult& result);
  StepMetrics train_step(int64_t step);
  double evaluate(int64_t step);
  void log_step(const StepMetrics& m, const std::optional<double>& eval_loss);
  MemoryPlan plan_memory_use() const;
  void log_memory(size_t pool_bytes) const;
  double model_flops_utilization(const StepMetrics& m) const;
  CheckpointState checkpoint_state(int64_t step, double loss,
                                   const std::optional<double>& eval_loss) const;
  void save_final(TrainResult& result, const std::optional<double>& eval_loss);
  void save_output(const fs::path& ckpt) const;

  const Recipe& r_;
  WorkerContext& ctx_;
  const WorkerIdentity& id_;
  Communicator& world_;
  const bool lead_;
  const fs::path run_dir_;
  const std::string recipe_yaml_;  // the effective recipe, for recipe.yaml and every manifest
  const ModelConfig config_;
  // The base's config, tokenizer and generation files, read once (rank 0 writes them beside every
  // checkpoint and into final/), so a base that moves mid-run does not fail later saves.
  const std::shared_ptr<const HfModelFiles> model_files_;
  // A LoRA run's base (model.path) fingerprint: recorded in every checkpoint, checked on resume.
  const std::optional<FileDigest> base_fingerprint_;
  const RunShape shape_;    // strategy, shard group size and reduce dtype (run_shape.h)
  const size_t start_rss_;  // before the backend, model and shards exist: the plan's baseline
  std::unique_ptr<Backend> backend_;
  TrainCore core_;  // the model, its shards, the optimizer and the step's device half
  Decoder& model_ = core_.model();
  Fsdp& fsdp_ = core_.fsdp();
  Optimizer& opt_ = core_.optimizer();
  std::unique_ptr<TrainData> data_;
  std::optional<TokenizedDataset> eval_file_;  // data.eval's examples
  const ExampleSource* eval_data_ = nullptr;   // eval_file_, or data.eval_split's held-out set
  std::string eval_name_;                      // what eval_data_ is, for messages
  std::optional<EvalBatches> eval_batches_;
  const ScheduleSettings schedule_;
  CheckpointSaver saver_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0, output.tensorboard
  PinnedBuffer<double> step_sums_host_;             // the step's one host read of core_.sums()
  std::vector<Batch> batches_;
  int64_t max_steps_ = 0;  // train.max_steps, or train.epochs' steps
  int64_t start_step_ = 0;
  fs::path resumed_from_;  // the checkpoint the run continues (empty: a fresh start)
  bool stop_ = false;  // a rank asked to stop: from train_step's sync record, alike on every rank
  Clock::time_point t_start_;
  const bool tty_;
  mutable double peak_flops_ = -1;  // the backend's, asked at the first step's log (< 0: not yet)
  MemoryPlan plan_;                 // this rank's predicted memory, printed before step 1
  std::array<double, kPreferenceMetrics.size()> eval_preference_{};  // the last evaluation's
  std::optional<ReferenceTable> ref_table_;                          // dpo.precompute_reference's
};

// The recipe's output.dir is the context's run directory: its metrics.jsonl writer is the run's.
const Recipe& Trainer::checked(const Recipe& r, const WorkerContext& ctx) {
  const auto normal = [](const fs::path& p) { return fs::absolute(p / "").lexically_normal(); };
  if (ctx.run_dir().empty() || normal(r.output.dir) != normal(ctx.run_dir())) {
    fail(
        "output.dir {} is not the worker's run directory \"{}\" (LaunchOptions::run_dir): the "
        "trainer writes metrics.jsonl through it; set it to output.dir",
        r.output.dir, ctx.run_dir().string());
  }
  if (r.checkpoint.keep_best > 0 && r.checkpoint.best_metric == BestMetric::kEvalLoss &&
      r.data.eval.empty() && r.data.eval_split == 0) {
    fail(
        "checkpoint.keep_best: {} keeps checkpoints by eval_loss, but there is no evaluation data "
        "(set data.eval or data.eval_split, or checkpoint.best_metric=loss)",
        r.checkpoint.keep_best);
  }
  return r;
}

Communicator& Trainer::shard_group() {
  return shape_.strategy == ShardStrategy::kHybridShard ? ctx_.intra_node() : world_;
}

Communicator* Trainer::replica_group() {
  return shape_.strategy == ShardStrategy::kHybridShard ? &ctx_.inter_node() : nullptr;
}

ShardSetup Trainer::shard_setup() {
  return {.strategy = shape_.strategy,
          .shard = shard_group(),
          .replica = replica_group(),
          .prefetch = r_.dist.prefetch,
          .reduce_dtype = shape_.reduce_dtype};
}

ScheduleSettings Trainer::schedule_settings() const {
  return {r_.schedule.name, r_.schedule.warmup_steps, r_.schedule.min_lr_ratio};
}

RetentionPolicy Trainer::retention() const {
  RetentionPolicy p;
  p.keep_last = static_cast<int>(r_.checkpoint.keep_last);
  p.keep_best = static_cast<int>(r_.checkpoint.keep_best);
  p.best_metric = r_.checkpoint.best_metric;
  p.maximize = r_.checkpoint.best_mode == BestMode::kMax;
  return p;
}

// Under no_shard every rank holds everything, under hybrid_shard every node does; only one copy
// of each shard is written.
bool Trainer::writes_shard() const {
  if (shape_.strategy == ShardStrategy::kNoShard) return id_.rank == 0;
  if (shape_.strategy == ShardStrategy::kHybridShard) return id_.node_rank == 0;
  return true;
}

Trainer::Trainer(const Recipe& r, WorkerContext& ctx)
    : r_(checked(r, ctx)),
      ctx_(ctx),
      id_(ctx.identity()),
      world_(ctx.comm()),
      lead_(id_.rank == 0),
      run_dir_(ctx.run_dir()),
      recipe_yaml_(recipe_to_yaml(r)),
      config_(read_model_config(r)),
      model_files_(lead_ ? std::make_shared<const HfModelFiles>(HfModelFiles::read(
                               r.model.path, r.data.tokenizer, r.data.chat_template))
                         : nullptr),
      base_fingerprint_(r.lora ? std::optional(base_fingerprint(r.model.path)) : std::nullopt),
      shape_(run_shape(r, id_.world_size, id_.local_world_size)),
      start_rss_(resident_bytes()),
      backend_(make_backend(r.train.device, r.train.dtype, id_.local_rank)),
      core_(config_, *backend_, r.lora, shard_setup(), optimizer_settings(r),
            step_settings(r, id_.rank)),
      schedule_(schedule_settings()),
      saver_(run_dir_ / "checkpoints", model_.layout(), fsdp_, opt_, world_, writes_shard(),
             r.checkpoint.background, retention()),
      step_sums_host_(*backend_, TrainCore::kNumSums),
      batches_(r.train.grad_accum_steps),
      tty_(::isatty(STDERR_FILENO) != 0) {
  // no_shard holds every unit whole, whatever its group's size.
  KILN_CHECK(
      shape_.strategy == ShardStrategy::kNoShard || shard_group().world_size() == shape_.shard_size,
      "the shard group has {} ranks, the run's shape {}", shard_group().world_size(),
      shape_.shard_size);
  check_context_length(r_, config_, lead_);
  claim_run_dir();
  if (lead_) {
    fs::create_directories(run_dir_);
    write_file_atomic(run_dir_ / "recipe.yaml", recipe_yaml_);
    if (const std::string& base = model_files_->replaced_chat_template(); !base.empty()) {
      KILN_LOG_INFO("final/: chat template {} (data.template) replaces the base's {}",
                    r_.data.chat_template, base);
    }
  }
  // Transports into run_meta.json and the log; a dist.require_transport mismatch stops here.
  record_run_start(r_, ctx_, name_of(kShardStrategyNames, shape_.strategy));
  plan_ = plan_memory_use();
  KILN_LOG_INFO("rank {}: memory plan: {}", id_.rank, plan_.summary());
  load_weights();
  // Every rank reads its own disjoint share of each epoch (the data is tokenized, or its cache
  // mapped, by the first worker of each node first; the loader logs the counts).
  data_ = open_train_data(r_, config_.vocab_size, ctx_);
  max_steps_ = train_steps(r_, data_->examples(), ctx_);
  if (!r_.data.eval.empty() || r_.data.eval_split > 0) open_eval_data();
  resume();
  if (r_.dpo && r_.dpo->precomputed()) prepare_reference_table();
  ctx_.restart_metrics_after(start_step_);  // a resumed run reports the later steps again
  if (lead_ && r_.output.tensorboard) {
    tensorboard_ = std::make_unique<TensorBoardWriter>(run_dir_ / "tensorboard");
  }
}

// Each rank reads only its own shard's elements of the base model's units (the first units of a
// LoRA layout too) from the HF directory `dir`, in pieces of at most kLoadChunk floats through
// one host buffer: no rank holds a unit it does not own, nor more of the file than a piece.
void Trainer::load_base_units(Fsdp& fsdp, const std::string& dir) {
  constexpr size_t kLoadChunk = size_t{4} << 20;  // 16 MiB of f32
  const ParamLayout base(config_);
  HfWeightsReader reader(dir, base);
  const auto ranges = fsdp.shard_ranges();
  Buffer<float> piece(kLoadChunk);
  for (int u = 0; u < base.num_units(); ++u) {
    fsdp.zero_shard(u);  // padding past the unit's end stays zero
    for (size_t b = ranges[u].begin; b < ranges[u].end; b += kLoadChunk) {
      const size_t e = std::min(ranges[u].end, b + kLoadChunk);
      reader.read_range(u, {b, e}, piece.data());
      fsdp.load_shard(u, b - ranges[u].begin, piece.data(), e - b);
    }
  }
}

// model.path's weights, then a LoRA run's adapters, and a preference run's own reference model
// (dpo.reference: model.path's weights again, or another directory's).
void Trainer::load_weights() {
  load_base_units(fsdp_, r_.model.path);
  if (model_.layout().has_lora()) load_adapters();
  if (Fsdp* ref = core_.reference()) {
    const std::string& dir =
        r_.dpo->reference == kReferenceBase ? r_.model.path : r_.dpo->reference;
    load_base_units(*ref, dir);
    if (lead_) KILN_LOG_INFO("dpo: reference model {} (frozen)", dir);
  }
  if (lead_) log_model();
}

// dpo.precompute_reference: the run's reference_logps.bin, or (before step 1) every training
// and evaluation pair's reference log-probabilities, each rank computing its share of the pairs
// (EvalBatches' rounds), summed over the ranks and written by rank 0. From then on the steps read
// the table and the reference model is released.
void Trainer::prepare_reference_table() {
  const fs::path file = run_dir_ / "reference_logps.bin";
  const size_t train_pairs = data_->examples().size();
  const size_t eval_pairs = eval_data_ != nullptr ? eval_data_->size() : 0;
  if (auto t = ReferenceTable::load(file, train_pairs, eval_pairs)) {
    ref_table_ = std::move(*t);
    if (lead_) KILN_LOG_INFO("dpo: reference log-probabilities from {}", file.string());
  } else {
    if (start_step_ > 0) {
      fail(
          "dpo.precompute_reference: {} is missing, and at step {} the reference can no longer "
          "be computed from the policy (resume the run with the file, or start over)",
          file.string(), start_step_);
    }
    const auto t0 = Clock::now();
    ref_table_.emplace(train_pairs, eval_pairs);
    fill_reference_table(data_->examples(), false);
    if (eval_data_ != nullptr) fill_reference_table(*eval_data_, true);
    world_.all_reduce(ref_table_->values().data(), ref_table_->values().size(), ReduceOp::kSum);
    if (lead_) {
      ref_table_->save(file);
      KILN_LOG_INFO("dpo: reference log-probabilities of {} + {} pairs computed in {:.1f}s: {}",
                    train_pairs, eval_pairs,
                    std::chrono::duration<double>(Clock::now() - t0).count(), file.string());
    }
    world_.barrier();
  }
  core_.use_reference_table(&*ref_table_);
}

// This rank's share of `pairs` (EvalBatches: every rank runs every round, the forward being
// collective) into ref_table_; the other ranks' entries stay zero until the sum.
void Trainer::fill_reference_table(const ExampleSource& pairs, bool eval) {
  const EvalBatches batches(pairs, r_.train.micro_batch_size, id_.rank, id_.world_size, 0,
                            rows_per_example(r_));
  Batch b;
  std::vector<double> host;
  for (int64_t i = 0; i < batches.rounds(); ++i) {
    batches.fill(i, b);
    host.resize(2 * static_cast<size_t>(b.B));
    backend_->copy_to_host(host.data(), core_.reference_logps(b, eval),
                           host.size() * sizeof(double));
    backend_->synchronize();
    for (int p = 0; 2 * p + 1 < b.B; ++p) {
      const int64_t e = b.examples[static_cast<size_t>(2 * p)];
      if (e >= 0)
        std::copy_n(host.data() + 4 * p, 4, ref_table_->pair(static_cast<size_t>(e), eval));
    }
  }
}

// A LoRA run's adapters: model.adapter's (a PEFT directory, checked against the base before
// anything was allocated: preflight) or fresh ones as PEFT starts them, from train.seed. Each
// rank keeps its shard of each layer's unit (small: r (in + out) per target).
void Trainer::load_adapters() {
  const ParamLayout& layout = model_.layout();
  std::optional<PeftAdapter> adapter;
  if (!r_.model.adapter.empty()) adapter = read_peft_adapter(r_.model.adapter, config_);
  const auto ranges = fsdp_.shard_ranges();
  std::vector<float> unit;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    const int u = layout.lora_unit(static_cast<int>(l));
    unit.assign(layout.units()[u].numel, 0.0f);
    if (adapter) {
      lora_unit_from_tensors(layout, adapter->tensors, l, unit.data());
    } else {
      init_unit_values(layout, u, r_.train.seed, unit.data());
    }
    fsdp_.zero_shard(u);
    fsdp_.load_shard(u, 0, unit.data() + ranges[u].begin, ranges[u].size());
  }
}

void Trainer::log_model() const {
  std::string why_cpu;  // the notice train.device=auto owes when it falls back to the CPU
  if (r_.train.device == DeviceRequest::kAuto && backend_->device() == Device::kCpu) {
    std::string reason;
    visible_gpu_count(&reason);
    why_cpu = fmt::format(": no GPU visible ({})", reason);
  }
  const ParamLayout& layout = model_.layout();
  const std::string trains =
      layout.has_lora()
          ? fmt::format(" (frozen), LoRA rank {} on {}: {} parameters train{}", layout.lora().rank,
                        fmt::join(lora_target_names(layout.lora().targets), ","),
                        parameter_count_text(static_cast<int64_t>(layout.trainable_numel())),
                        r_.model.adapter.empty() ? "" : fmt::format(" from {}", r_.model.adapter))
          : "";
  KILN_LOG_INFO(
      "model {}: {} parameters{}, {} layers, hidden {}; {} worker(s), {} ({}); device {} "
      "(train.device {}{}), {}",
      r_.model.path, parameter_count_text(parameter_count(config_)), trains,
      config_.num_hidden_layers, config_.hidden_size, id_.world_size,
      name_of(kShardStrategyNames, shape_.strategy), world_.transport(),
      backend_->device() == Device::kCuda ? "cuda" : "cpu",
      name_of(kDeviceRequestNames, r_.train.device), why_cpu, backend_->name());
}

// Held-out data: data.eval (every rank loads it, no cache files) or data.eval_split's share of
// the training files; every rank evaluates its share.
void Trainer::open_eval_data() {
  if (!r_.data.eval.empty()) {
    eval_file_.emplace(load_eval_data(r_, config_.vocab_size, lead_));
    eval_data_ = &*eval_file_;
    eval_name_ = fmt::format("data.eval {}", r_.data.eval);
  } else {
    eval_data_ = data_->held_out();
    eval_name_ = fmt::format("data.eval_split {} of data.train", r_.data.eval_split);
  }
  eval_batches_.emplace(*eval_data_, r_.train.micro_batch_size, id_.rank, id_.world_size,
                        r_.eval.max_batches, rows_per_example(r_));
  if (lead_) {
    KILN_LOG_INFO("{}: {} examples, {} batch(es) of {} per rank per evaluation", eval_name_,
                  eval_data_->size(), eval_batches_->rounds(), r_.train.micro_batch_size);
  }
}

void Trainer::resume() {
  if (r_.train.resume.mode == ResumeMode::kNone) return;
  const fs::path ckpt_root = run_dir_ / "checkpoints";
  // Verified first, collectively; under auto a damaged checkpoint is skipped for an older one.
  std::optional<CheckpointCheck> from;
  if (r_.train.resume.mode == ResumeMode::kAuto) {
    from = newest_intact_checkpoint(ckpt_root, model_.layout(), world_);
  } else {
    from = check_checkpoint(fs::path(r_.train.resume.checkpoint), model_.layout(), world_);
  }
  if (from) {
    const Recipe written_with = checkpoint_recipe(from->dir);
    const bool refuse = r_.train.resume.mode == ResumeMode::kAuto;
    check_same_run(from->dir, written_with, r_, refuse, lead_);
    note_step_budget(from->dir, written_with, r_, max_steps_, lead_);
    const CheckpointState st = load_checkpoint(*from, model_.layout(), fsdp_, opt_);
    std::vector<FileDigest> data_now;
    for (const TokenizedDataset& f : data_->files) data_now.push_back(f.stats().source);
    check_data_unchanged(from->dir, st, r_, data_now, lead_);
    check_base_unchanged(from->dir, st, r_, base_fingerprint_);
    data_->sampler->restore(resumed_data_position(from->dir, st, written_with));
    start_step_ = st.step;
    resumed_from_ = from->dir;
    if (lead_) KILN_LOG_INFO("resumed from {} (step {})", from->dir.string(), st.step);
  } else if (lead_) {
    KILN_LOG_INFO("train.resume=auto: no checkpoint in {}, starting fresh", ckpt_root.string());
  }
}

// A fresh run (train.resume=none) never writes over another run's checkpoints: it is refused,
// or with output.overwrite=true the first worker of each node deletes them (and the old final
// model) before anything is written, unless the recipe reads from what it would delete. Restarts
// after a failure resume (train.resume=auto). First of all, what a crash left half done in the
// checkpoint directory is settled (recover_checkpoints).
void Trainer::claim_run_dir() {
  const fs::path ckpt_root = run_dir_ / "checkpoints";
  if (id_.local_rank == 0) {
    for (const std::string& what : recover_checkpoints(ckpt_root)) {
      KILN_LOG_WARN("checkpoints: {}", what);
    }
  }
  world_.barrier();
  const auto latest =
      r_.train.resume.mode == ResumeMode::kNone ? latest_checkpoint(ckpt_root) : std::nullopt;
  if (latest && !r_.output.overwrite) fail("{}", output_dir_in_use(r_, latest->dir));
  if (latest) {
    if (const auto clash = overwrite_deletes_input(r_)) fail("{}", *clash);
  }
  if (latest && id_.local_rank == 0) {
    KILN_LOG_WARN("output.overwrite=true: deleting {} and {} of the previous run",
                  ckpt_root.string(), final_model_dir(run_dir_).string());
    std::error_code ec;  // another node sharing the directory may be deleting it too
    fs::remove_all(ckpt_root, ec);
    fs::remove_all(final_model_dir(run_dir_), ec);
  }
  world_.barrier();
}

CheckpointState Trainer::checkpoint_state(int64_t step, double loss,
                                          const std::optional<double>& eval_loss) const {
  CheckpointState st;
  st.step = step;
  st.sampler = data_->sampler->state();
  st.strategy = name_of(kShardStrategyNames, shape_.strategy);
  st.recipe_yaml = recipe_yaml_;
  st.metrics = {{"loss", loss}};
  if (eval_loss) st.metrics["eval_loss"] = *eval_loss;
  st.model_config = config_to_json(config_);
  st.hf_files = model_files_;
  st.base = base_fingerprint_;
  st.holdout_rule = kHoldOutRule;
  for (size_t i = 0; i < data_->files.size(); ++i) {
    st.data_files.push_back({r_.data.train[i].path, data_->files[i].stats().source});
  }
  return st;
}

// Forward only, through FSDP's gathered units: the mean loss over every eval target of every
// rank; a preference run's over every eval pair, with TRL's metrics into eval_preference_. The
// loss sums stay on the device until the end.
double Trainer::evaluate(int64_t step) {
  core_.zero_loss();
  double targets = 0;
  Batch b;
  for (int64_t i = 0; i < eval_batches_->rounds(); ++i) {
    eval_batches_->fill(i, b);
    core_.evaluate(b);
    targets += static_cast<double>(b.num_targets());
  }
  std::array<double, TrainCore::kNumSums + 1> sums{};  // the device's, then the targets
  backend_->copy_to_host(sums.data(), core_.sums(), TrainCore::kNumSums * sizeof(double));
  backend_->synchronize();
  sums.back() = targets;
  world_.all_reduce(sums.data(), sums.size(), ReduceOp::kSum);
  if (r_.dpo) {
    const double pairs = sums[TrainCore::preference_sum(kPrefPairs)];
    if (pairs == 0) fail("step {}: {} has no preference pair to evaluate", step, eval_name_);
    for (size_t i = 0; i < kPreferenceMetrics.size(); ++i) {
      eval_preference_[i] = sums[TrainCore::preference_sum(kPreferenceMetrics[i].sum)] / pairs;
    }
    return sums[TrainCore::preference_sum(kPrefLoss)] / pairs;
  }
  if (sums.back() == 0) {
    fail("step {}: {} has no predicted tokens (every label masked?)", step, eval_name_);
  }
  return sums[TrainCore::kLossSum] / sums.back();
}

// One optimizer step: the host half (the batches, the step's sync record, the learning rate,
// the checks and metrics) around the core's device half (train_core.h), which is enqueued on the
// device whole; the host reads the loss sum, gradient norm and weights' sum once, at the end.
StepMetrics Trainer::train_step(int64_t step) {
  const auto t0 = Clock::now();
  // The step's control decisions, from one all-reduce of every rank's sync record.
  const auto ckpt = saver_.status();  // {still running, failed}
  StepSync sync;
  sync.writes_running = ckpt[0];
  sync.writes_failed = ckpt[1];
  sync.stop_requests = ctx_.stop_requested() ? 1 : 0;
  for (auto& b : batches_) {
    data_->sampler->next(b);
    sync.targets += static_cast<double>(b.num_targets());
    if (r_.dpo) sync.pairs += static_cast<double>(b.num_pairs());
    sync.tokens += static_cast<double>(b.B) * b.T;
  }
  sync.all_reduce(world_);
  saver_.on_status(sync.writes_running, sync.writes_failed);  // commits once all are done
  stop_ = sync.stop();  // every rank stops after this same step
  const double targets = sync.targets;
  // The loss's denominator: the step's predicted tokens, or a preference step's pairs.
  const double denominator = r_.dpo ? sync.pairs : targets;
  const double lr = lr_at(schedule_, r_.optimizer.lr, step, max_steps_);
  core_.step(batches_, denominator, step, lr);
  // The step's one device read.
  backend_->copy_to_host(step_sums_host_.data(), core_.sums(),
                         TrainCore::kNumSums * sizeof(double));
  backend_->synchronize();
  // Metrics only: the loss sums, and every rank's sum of squared weights (non-finite on one, on
  // all); the gradient norm is the shard group's already (its slot is kept out of the sum).
  std::array<double, TrainCore::kNumSums> sums;
  std::copy_n(step_sums_host_.data(), sums.size(), sums.begin());
  const double grad_norm = std::sqrt(sums[TrainCore::kGradSq]);
  sums[TrainCore::kGradSq] = 0;
  world_.all_reduce(sums.data(), sums.size(), ReduceOp::kSum);
  const double loss =
      r_.dpo ? sums[TrainCore::preference_sum(kPrefLoss)] : sums[TrainCore::kLossSum];
  if (!std::isfinite(grad_norm)) {
    fail("step {}: gradient norm is {} (loss {}); stopping (the last checkpoint is intact)",
         step + 1, grad_norm, loss / std::max(denominator, 1.0));
  }
  if (!std::isfinite(sums[TrainCore::kParamSq])) {
    fail(
        "step {}: the update made weights non-finite (lr {:.6g}, gradient norm {:.6g}; the step "
        "size overflows float32?); stopping (the last checkpoint is intact)",
        step + 1, lr, grad_norm);
  }
  StepMetrics m;
  m.step = step + 1;
  m.loss = denominator > 0 ? loss / denominator : 0.0;
  if (r_.dpo && denominator > 0) {
    m.pairs = static_cast<int64_t>(denominator);
    for (size_t i = 0; i < kPreferenceMetrics.size(); ++i) {
      m.preference[i] = sums[TrainCore::preference_sum(kPreferenceMetrics[i].sum)] / denominator;
    }
  }
  m.lr = lr;
  m.grad_norm = grad_norm;
  m.targets = static_cast<int64_t>(targets);
  m.tokens = static_cast<int64_t>(sync.tokens);
  m.step_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  m.tokens_per_s = m.tokens / std::max(m.step_seconds, 1e-9);
  return m;
}

void Trainer::log_step(const StepMetrics& m, const std::optional<double>& eval_loss) {
  Json row{{"step", m.step},
           {"loss", m.loss},
           {"lr", m.lr},
           {"grad_norm", m.grad_norm},
           {"tokens_per_s", m.tokens_per_s},
           {"tokens", m.tokens},
           {"targets", m.targets},
           {"step_s", m.step_seconds},
           {"epoch", data_->sampler->epoch()}};
  if (r_.dpo) {
    row["pairs"] = m.pairs;
    for (size_t i = 0; i < kPreferenceMetrics.size(); ++i) {
      row[kPreferenceMetrics[i].name] = m.preference[i];
    }
  }
  if (eval_loss) row["eval_loss"] = *eval_loss;
  if (eval_loss && r_.dpo) {
    for (size_t i = 0; i < kPreferenceMetrics.size(); ++i) {
      row[fmt::format("eval_{}", kPreferenceMetrics[i].name)] = eval_preference_[i];
    }
  }
  row["peak_rss_mib"] = peak_resident_bytes() / 1048576.0;
  const DeviceMemoryStats mem = backend_->memory_stats();
  row["device_mem_mib"] = mem.in_use / 1048576.0;
  row["device_peak_mib"] = mem.peak / 1048576.0;
  const double mfu = model_flops_utilization(m);
  if (mfu > 0) row["mfu"] = mfu;
  if (tensorboard_) tensorboard_->write_row(m.step, row);
  ctx_.report(row);  // metrics.jsonl (the context's writer) and the context's reporter
  const bool last = m.step == max_steps_;
  if (m.step % r_.train.log_every != 0 && !last && !eval_loss) return;
  const double elapsed = std::chrono::duration<double>(Clock::now() - t_start_).count();
  const double eta = elapsed / (m.step - start_step_) * (max_steps_ - m.step);
  // A preference step's accuracy and margin (kPreferenceMetrics' [2] and [3]).
  static_assert(kPreferenceMetrics[2].sum == kPrefAccuracy &&
                kPreferenceMetrics[3].sum == kPrefMargin);
  const std::string preference =
      r_.dpo ? fmt::format(" | acc {:.3f} | margin {:.4f}", m.preference[2], m.preference[3])
             : std::string();
  const std::string line = fmt::format(
      "step {}/{} | loss {:.4f}{}{} | lr {:.3e} | grad_norm {:.3f} | {:.0f} tok/s{} | mem {:.0f} "
      "MiB | ETA {}",
      m.step, max_steps_, m.loss, preference,
      eval_loss ? fmt::format(" | eval_loss {:.4f}", *eval_loss) : std::string(), m.lr, m.grad_norm,
      m.tokens_per_s, mfu > 0 ? fmt::format(" | MFU {:.1f}%", 100 * mfu) : std::string(),
      mem.peak / 1048576.0, format_duration(eta));
  if (tty_) {
    // Lines with an evaluation stay on screen.
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), last || eval_loss ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

// Model FLOPs (6 x matrix parameters x tokens + attention, train_flops; a LoRA step's own count;
// a live DPO reference's forward, a third of a full step's) per second over the devices' peak
// (Backend::peak_flops, measured once): 0 when the peak is unknown.
double Trainer::model_flops_utilization(const StepMetrics& m) const {
  if (peak_flops_ < 0) peak_flops_ = backend_->peak_flops();
  if (peak_flops_ <= 0 || m.step_seconds <= 0) return 0;
  double flops =
      train_flops(config_, m.tokens, r_.data.seq_len, m.targets, r_.lora ? &*r_.lora : nullptr);
  if (r_.dpo && r_.dpo->live_reference()) {
    flops += train_flops(config_, m.tokens, r_.data.seq_len, m.targets) / 3;
  }
  return flops / m.step_seconds / (peak_flops_ * id_.world_size);
}

// This rank's memory plan: the recipe's settings on this group and backend, from the process's
// own resident memory at the start.
MemoryPlan Trainer::plan_memory_use() const {
  const bool on_cpu = backend_->device() == Device::kCpu;
  MemorySettings s = memory_settings(r_, id_.world_size, id_.local_world_size, on_cpu);
  // The group itself says whether it got the shared memory lane.
  s.shm_lane = s.gloo && world_.transport_info().shm_lane;
  s.writes_final = lead_;
  s.baseline = start_rss_;
  return plan_memory(config_, s);
}

// Memory figures per rank, after the final save: what sharding saves, and the plan beside the
// measured peak (RSS on the CPU, the backend's device peak on a GPU).
void Trainer::log_memory(size_t pool_bytes) const {
  size_t opt_bytes = 0;
  for (int u = 0; u < fsdp_.num_units(); ++u) {
    opt_bytes += opt_.m(u).bytes() + opt_.v(u).bytes();
  }
  const bool on_cpu = backend_->device() == Device::kCpu;
  const double measured =
      static_cast<double>(on_cpu ? peak_resident_bytes() : backend_->memory_stats().peak);
  // On a GPU the backend counts kiln's allocations only, so they are held against the plan's
  // (the plan's peak adds the CUDA context and NCCL's buffers, which no allocation of kiln's
  // makes).
  const double predicted = static_cast<double>(on_cpu ? plan_.peak : plan_.device_peak);
  KILN_LOG_INFO(
      "rank {}: peak {} {:.0f} MiB, predicted {:.0f} MiB ({}); peak RSS {:.0f} MiB; sharded "
      "params+grads {:.0f} MiB, optimizer state {:.0f} MiB, peak gathered units {:.0f} MiB, "
      "FSDP pool {:.0f} MiB (predicted {:.0f}), activations {:.0f} MiB (predicted {:.0f})",
      id_.rank, on_cpu ? "RSS" : "device memory", measured / 1048576.0, predicted / 1048576.0,
      prediction_error(predicted, measured), peak_resident_bytes() / 1048576.0,
      (fsdp_.param_shard_bytes() + fsdp_.grad_shard_bytes()) / 1048576.0, opt_bytes / 1048576.0,
      fsdp_.peak_gathered_bytes() / 1048576.0, pool_bytes / 1048576.0,
      (plan_.gathered + plan_.grad_buffers + plan_.comm) / 1048576.0,
      model_.activation_bytes() / 1048576.0, plan_.activations / 1048576.0);
}

// The final state as a sharded checkpoint (no rank gathers the model), then rank 0 streams it
// unit by unit into final/ in Hugging Face layout. A background save still in flight is
// committed first; the last one is written at once.
void Trainer::save_final(TrainResult& result, const std::optional<double>& eval_loss) {
  saver_.flush();
  fsdp_.release_buffers();  // the save's buffers take the pool's place, not their own
  saver_.save(checkpoint_state(max_steps_, result.last_loss, eval_loss), /*sync=*/true);
  const fs::path last_ckpt = saver_.last_committed();
  result.model_dir = final_model_dir(run_dir_);
  if (lead_) {
    save_output(last_ckpt);
    KILN_LOG_INFO("saved {} ({}) from {}", result.model_dir.string(),
                  name_of(kOutputDTypeNames, r_.output.dtype), last_ckpt.string());
  }
  world_.barrier();
}

// final/ from checkpoint `ckpt` (rank 0): the model, or a LoRA run's adapters.
void Trainer::save_output(const fs::path& ckpt) const {
  CheckpointUnitReader reader(ckpt, model_.layout());
  save_model_output(
      final_model_dir(run_dir_), config_, *model_files_, model_.layout(),
      [&](int u, float* out) { reader.read_unit(u, out); }, r_.output.dtype, r_.model.base_name(),
      base_fingerprint_);
}

// A resumed run with no step left (its last checkpoint is at train.max_steps or beyond) trains
// nothing and writes no checkpoint; only a final/ that a crash kept from being written is
// exported from that checkpoint.
void Trainer::finish_finished_run(TrainResult& result) {
  result.steps = start_step_;
  result.nothing_to_do = true;
  result.model_dir = final_model_dir(run_dir_);
  const bool have_final = has_model_output(result.model_dir, model_.layout());
  if (lead_) {
    KILN_LOG_INFO("{} is at step {}, train.max_steps is {}: nothing left to train{}",
                  resumed_from_.string(), start_step_, max_steps_,
                  have_final ? "" : "; exporting the missing final model from it");
    if (!have_final) save_output(resumed_from_);
  }
  world_.barrier();
}

TrainResult Trainer::run(const std::function<void(const StepMetrics&)>& on_step) {
  TrainResult result;
  result.start_step = start_step_;
  t_start_ = Clock::now();
  if (!resumed_from_.empty() && start_step_ >= max_steps_) {
    finish_finished_run(result);
    return result;
  }
  const bool has_eval = eval_batches_.has_value();
  std::optional<double> final_eval_loss;
  for (int64_t step = start_step_; step < max_steps_ && !result.stopped; ++step) {
    ctx_.begin_step(step + 1);  // hang reports and KILN_FAULT name the step
    const StepMetrics m = train_step(step);
    if (step == start_step_) result.first_loss = m.loss;
    result.last_loss = m.loss;
    result.steps = m.step;
    if (on_step) on_step(m);
    const bool last = m.step == max_steps_;
    std::optional<double> eval_loss;
    if (has_eval && (last || (r_.eval.every_steps > 0 && m.step % r_.eval.every_steps == 0))) {
      fault_point("eval", m.step);
      eval_loss = evaluate(m.step);
    }
    if (last) final_eval_loss = eval_loss;
    if (stop_ && !last) {
      saver_.flush();
      saver_.save(checkpoint_state(m.step, m.loss, eval_loss), /*sync=*/true);
      result.stopped = true;
    } else if (r_.checkpoint.every_steps > 0 && m.step % r_.checkpoint.every_steps == 0 && !last) {
      saver_.save(checkpoint_state(m.step, m.loss, eval_loss));
    }
    if (lead_) log_step(m, eval_loss);
    ctx_.end_step(m.step);  // every rank: the hang watchdog's last completed step
  }
  if (result.stopped) {
    if (lead_) {
      KILN_LOG_WARN("stopped on request after step {}: checkpoint {} committed", result.steps,
                    saver_.last_committed().string());
    }
    world_.barrier();
    return result;
  }
  const size_t pool_bytes = fsdp_.pool_bytes();
  save_final(result, final_eval_loss);
  log_memory(pool_bytes);
  return result;
}

TrainResult train(const Recipe& r, WorkerContext& ctx,
                  const std::function<void(const StepMetrics&)>& on_step) {
  Trainer trainer(r, ctx);
  return trainer.run(on_step);
}

}  // namespace kiln
