#include "kiln/train/train_core.h"

#include "kiln/model/lora_ops.h"

namespace kiln {

StepSettings step_settings(const Recipe& r, int rank) {
  return {.recompute = r.train.activation_checkpointing,
          .grad_clip = r.train.grad_clip,
          .seed = r.train.seed,
          .rank = rank};
}

TrainCore::TrainCore(const ModelConfig& config, const Backend& backend,
                     const std::optional<LoraConfig>& lora, const ShardSetup& shards,
                     const OptimizerSettings& optimizer, const StepSettings& step)
    : be_(backend),
      settings_(step),
      model_(config, backend, lora),
      fsdp_(model_.layout(), backend, shards.strategy, shards.shard, shards.replica,
            shards.prefetch, shards.reduce_dtype),
      opt_(optimizer, model_.layout(), fsdp_.shard_ranges(), backend),
      sums_(backend, kNumSums) {}

// The loss is the mean over every predicted token of the step (all micro-batches, all ranks):
// each micro-batch's gradient is scaled by 1 / targets, so accumulation and data parallelism
// give the gradient of one large batch.
void TrainCore::forward_backward(std::span<const Batch> micro, double targets, int64_t step) {
  double* loss_sum = sums_.data() + kLossSum;
  fsdp_.zero_grads();
  be_.fill_zero(loss_sum, sizeof(double));
  if (targets <= 0) return;
  const float scale = static_cast<float>(1.0 / targets);
  const int k = static_cast<int>(micro.size());
  for (int i = 0; i < k; ++i) {
    fsdp_.set_sync_grads(i == k - 1);  // the last micro-batch reduces the gradients
    // LoRA dropout's masks: a function of the run's seed, the step, the micro-step and the
    // rank, so a resumed step draws the same ones.
    model_.set_dropout_seed(lora_micro_batch_seed(settings_.seed, step, i, settings_.rank));
    model_.forward_backward(micro[static_cast<size_t>(i)], fsdp_, scale, settings_.recompute,
                            loss_sum);
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

void TrainCore::step(std::span<const Batch> micro, double targets, int64_t step, double lr) {
  forward_backward(micro, targets, step);
  update(lr);
}

void TrainCore::zero_loss() { be_.fill_zero(sums_.data() + kLossSum, sizeof(double)); }

void TrainCore::evaluate(const Batch& batch) {
  model_.forward(batch, fsdp_, sums_.data() + kLossSum);
  fsdp_.finish_forward();
}

}  // namespace kiln
