#include "kiln/train/train_core.h"

#include "kiln/model/lora_ops.h"

namespace kiln {

StepSettings step_settings(const Recipe& r, int rank) {
  return {.recompute = r.train.activation_checkpointing,
          .grad_clip = r.train.grad_clip,
          .seed = r.train.seed,
          .rank = rank,
          .dpo = r.dpo};
}

namespace {
// Whether a preference run reads a reference model of its own: full fine-tuning with a loss that
// has a reference (LoRA's is the base with the adapters off), unless that reference is the
// starting weights and precomputed (the policy computes it before step 1).
bool has_own_reference(const StepSettings& s, const std::optional<LoraConfig>& lora) {
  if (!s.dpo || !s.dpo->uses_reference() || lora) return false;
  return !(s.dpo->precomputed() && s.dpo->reference == kReferenceBase);
}
}  // namespace

TrainCore::TrainCore(const ModelConfig& config, const Backend& backend,
                     const std::optional<LoraConfig>& lora, const ShardSetup& shards,
                     const OptimizerSettings& optimizer, const StepSettings& step)
    : be_(backend),
      settings_(step),
      model_(config, backend, lora),
      fsdp_(model_.layout(), backend, shards.strategy, shards.shard, shards.replica,
            shards.prefetch, shards.reduce_dtype),
      opt_(optimizer, model_.layout(), fsdp_.shard_ranges(), backend),
      sums_(backend, kNumSums),
      ref_seq_(backend, 0),
      policy_seq_(backend, 0) {
  if (has_own_reference(step, lora)) {
    ref_layout_.emplace(model_.layout().frozen());
    ref_fsdp_.emplace(*ref_layout_, backend, shards.strategy, shards.shard, shards.replica,
                      shards.prefetch, shards.reduce_dtype);
  }
}

const double* TrainCore::reference_logps(const Batch& batch, bool eval) {
  if (!settings_.dpo->uses_reference()) return nullptr;
  const size_t n = 2 * static_cast<size_t>(batch.B);
  ref_seq_.resize(n);
  if (ref_table_ != nullptr) {
    if (ref_staging_free_) ref_staging_free_->synchronize();  // the last copy has left it
    if (ref_staging_.size() < n) ref_staging_ = PinnedBuffer<double>(be_, n);
    ref_table_->rows_of(batch, eval, ref_staging_.data());
    be_.copy_to_device(ref_seq_.data(), ref_staging_.data(), n * sizeof(double));
    ref_staging_free_ = be_.compute_stream().record();
    return ref_seq_.data();
  }
  be_.fill_zero(ref_seq_.data(), n * sizeof(double));
  const bool lora = model_.layout().has_lora();
  UnitAccess& reference = ref_fsdp_ ? static_cast<UnitAccess&>(*ref_fsdp_) : fsdp_;
  // The reference: its own model, or the base with the adapters off, or (precomputing before
  // step 1, reference base) the policy's starting weights.
  model_.sequence_logps(batch, reference, ref_seq_.data(), /*base_only=*/!ref_fsdp_ && lora);
  (ref_fsdp_ ? *ref_fsdp_ : fsdp_).finish_forward();
  return ref_seq_.data();
}

void TrainCore::use_reference_table(const ReferenceTable* table) {
  ref_table_ = table;
  ref_fsdp_.reset();
}

void TrainCore::preference_step(const Batch& batch, double scale) {
  const PreferenceHead head{settings_.dpo->terms(scale), reference_logps(batch, false),
                            sums_.data() + preference_sum(kPrefLoss)};
  model_.forward_backward(batch, fsdp_, head, settings_.recompute);
}

// The loss is the mean over every predicted token of the step (all micro-batches, all ranks), or
// over every pair of a preference step: each micro-batch's gradient is scaled by 1 /
// denominator, so accumulation and data parallelism give the gradient of one large batch.
void TrainCore::forward_backward(std::span<const Batch> micro, double denominator, int64_t step) {
  double* loss_sum = sums_.data() + kLossSum;
  fsdp_.zero_grads();
  be_.fill_zero(loss_sum, sizeof(double));
  be_.fill_zero(sums_.data() + kPreference, kNumPreferenceSums * sizeof(double));
  if (denominator <= 0) return;
  const float scale = static_cast<float>(1.0 / denominator);
  const int k = static_cast<int>(micro.size());
  for (int i = 0; i < k; ++i) {
    fsdp_.set_sync_grads(i == k - 1);  // the last micro-batch reduces the gradients
    // LoRA dropout's masks: a function of the run's seed, the step, the micro-step and the
    // rank, so a resumed step draws the same ones.
    model_.set_dropout_seed(lora_micro_batch_seed(settings_.seed, step, i, settings_.rank));
    const Batch& b = micro[static_cast<size_t>(i)];
    if (settings_.dpo) {
      preference_step(b, 1.0 / denominator);
    } else {
      model_.forward_backward(b, fsdp_, scale, settings_.recompute, loss_sum);
    }
    fsdp_.finish_backward();
  }
}

// The norm (before clipping), the clip, the update of the trainable units (a LoRA run's base is
// frozen) and the updated weights' squared sum (in double, so finite unless a weight is not).
void TrainCore::update(double lr) {
  double* grad_sq = sums_.data() + kGradSq;
  double* param_sq = sums_.data() + kParamSq;
  fsdp_.grad_sq_norm(grad_sq);
  if (settings_.grad_clip > 0) fsdp_.clip_grads(grad_sq, settings_.grad_clip);
  opt_.begin_step();
  const auto ranges = fsdp_.shard_ranges();
  be_.fill_zero(param_sq, sizeof(double));
  for (int u = 0; u < fsdp_.num_units(); ++u) {
    if (!fsdp_.trainable(u)) continue;
    opt_.step(u, fsdp_.shard_params(u), fsdp_.shard_grads(u), lr);
    be_.sum_squares(param_sq, fsdp_.shard_params(u), ranges[u].size());
  }
}

void TrainCore::step(std::span<const Batch> micro, double denominator, int64_t step, double lr) {
  forward_backward(micro, denominator, step);
  update(lr);
}

void TrainCore::zero_loss() {
  be_.fill_zero(sums_.data() + kLossSum, sizeof(double));
  be_.fill_zero(sums_.data() + kPreference, kNumPreferenceSums * sizeof(double));
}

// A preference batch: the policy's and the reference's sequence log-probabilities, then the
// loss and metric sums of its pairs (no gradient).
void TrainCore::evaluate(const Batch& batch) {
  if (!settings_.dpo) {
    model_.forward(batch, fsdp_, sums_.data() + kLossSum);
    fsdp_.finish_forward();
    return;
  }
  const double* ref = reference_logps(batch, /*eval=*/true);
  policy_seq_.resize(2 * static_cast<size_t>(batch.B));
  be_.fill_zero(policy_seq_.data(), policy_seq_.size() * sizeof(double));
  model_.sequence_logps(batch, fsdp_, policy_seq_.data(), /*base_only=*/false);
  fsdp_.finish_forward();
  be_.preference_loss(nullptr, sums_.data() + kPreference, policy_seq_.data(), ref, nullptr,
                      batch.B, settings_.dpo->terms(1.0), 0, batch.B / 2);
}

}  // namespace kiln
