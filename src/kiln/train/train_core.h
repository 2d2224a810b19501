// The device half of training, in one place: the model, its FSDP shards, the optimizer and the
// step over them. The trainer runs it on its backend; the memory plan (memory_plan.h) runs the
// same object on the counting backend, so the plan cannot leave out work the step does.
//
// One step, all of it enqueued on the backend's compute stream (no host read inside):
//   zero the gradient shards and the loss sum
//   per micro-batch i of k: forward + backward through FSDP (the last one reduces the gradients);
//     under a dpo section, first the reference's sequence log-probabilities (a forward of the
//     frozen reference model, or of the base with the adapters off under LoRA; none for SimPO),
//     then the preference loss's forward + backward (model/preference_head.h)
//   squared gradient norm over every trainable shard, summed over the shard group
//   clip every gradient shard to train.grad_clip (0: none)
//   the optimizer over the trainable units, then this rank's sum of squared weights
// The caller reads sums() once after it (the trainer: one copy to the host per step).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "kiln/comm/communicator.h"
#include "kiln/data/batch.h"
#include "kiln/fsdp/fsdp.h"
#include "kiln/kernels/device/device_buffer.h"
#include "kiln/kernels/ops.h"
#include "kiln/model/config.h"
#include "kiln/model/decoder.h"
#include "kiln/train/optimizer.h"
#include "kiln/train/recipe.h"
#include "kiln/train/reference_table.h"

namespace kiln {

// How the units are sharded (Fsdp's constructor): `shard` is the group parameters are sharded
// over (the world, or the node under hybrid_shard), `replica` the group shards are replicated
// over (nullptr unless hybrid_shard).
struct ShardSetup {
  ShardStrategy strategy = ShardStrategy::kNoShard;
  Communicator& shard;
  Communicator* replica = nullptr;
  bool prefetch = true;             // dist.prefetch
  DType reduce_dtype = DType::F32;  // dist.reduce_dtype
};

// The recipe's settings the step reads.
struct StepSettings {
  bool recompute = false;  // train.activation_checkpointing
  double grad_clip = 0;    // train.grad_clip: the global gradient norm's bound; 0: no clipping
  uint64_t seed = 0;       // train.seed: with the step, micro-step and rank, LoRA dropout's masks
  int rank = 0;            // this rank of the world
  std::optional<DpoConfig> dpo =
      std::nullopt;  // the dpo section: a preference loss over the batches' pairs
  bool operator==(const StepSettings&) const = default;
};

// Rank `rank`'s StepSettings from the recipe: the trainer's, and (as rank 0) the memory plan's.
StepSettings step_settings(const Recipe& r, int rank);

class TrainCore {
 public:
  // Allocates, in this order: the model's own buffers, the parameter and gradient shards, the
  // optimizer state, the step's device scalars, and a preference run's reference shards (a
  // frozen copy of the model, loaded by the caller through reference(); none under LoRA, whose
  // reference is the base, or for SimPO).
  TrainCore(const ModelConfig& config, const Backend& backend,
            const std::optional<LoraConfig>& lora, const ShardSetup& shards,
            const OptimizerSettings& optimizer, const StepSettings& step);

  // Enqueues optimizer step `step` (0-based) at learning rate `lr` over `micro` (the step's
  // micro-batches, train.grad_accum_steps of them). `denominator`: the loss's, over every rank:
  // the step's predicted tokens, or a preference run's pairs (Batch::num_pairs); with none, no
  // forward or backward runs (the gradients stay zero).
  void step(std::span<const Batch> micro, double denominator, int64_t step, double lr);

  // Evaluation: zero_loss(), then evaluate() per batch adds the batch's loss sum into
  // sums()[kLossSum] (forward only, through the gathered units), or a preference run's sums
  // into sums()[kPreference + k].
  void zero_loss();
  void evaluate(const Batch& batch);

  // The step's device doubles, sums()[k]: the loss sum (this rank's), the squared gradient norm
  // before clipping (the shard group's), this rank's sum of squared weights after the update,
  // then a preference run's loss and metric sums (this rank's pairs'), kPreference +
  // PreferenceSum (kernels/preference_terms.h).
  enum Sum {
    kLossSum,
    kGradSq,
    kParamSq,
    kPreference,
    kNumSums = kPreference + kNumPreferenceSums
  };
  const double* sums() const { return sums_.data(); }
  // The index in sums() of a preference sum.
  static constexpr int preference_sum(PreferenceSum k) { return kPreference + static_cast<int>(k); }

  // A preference run's frozen reference model to load (dpo.reference), or nullptr when it reads
  // none of its own (LoRA's reference is the base; SimPO has none; with
  // dpo.precompute_reference and reference base, the policy's own starting weights).
  Fsdp* reference() { return ref_fsdp_ ? &*ref_fsdp_ : nullptr; }

  // The reference's (logp, length) of each of the batch's sequences, (B, 2) on the device (until
  // the next call): from the table given to use_reference_table (its evaluation set's part for
  // an evaluation batch, `eval`), else a forward of the reference (before step 1 only, with
  // dpo.precompute_reference). nullptr for SimPO.
  const double* reference_logps(const Batch& batch, bool eval);
  // From now on the reference comes from `table`, which the caller keeps; the reference model,
  // if any, is released.
  void use_reference_table(const ReferenceTable* table);

  Decoder& model() { return model_; }
  const Decoder& model() const { return model_; }
  Fsdp& fsdp() { return fsdp_; }
  const Fsdp& fsdp() const { return fsdp_; }
  Optimizer& optimizer() { return opt_; }
  const Optimizer& optimizer() const { return opt_; }

 private:
  void forward_backward(std::span<const Batch> micro, double denominator, int64_t step);
  void update(double lr);
  // A preference micro-batch's forward + backward, its gradient scaled by `scale`.
  void preference_step(const Batch& batch, double scale);

  const Backend& be_;
  const StepSettings settings_;
  Decoder model_;
  Fsdp fsdp_;
  Optimizer opt_;
  DeviceBuffer<double> sums_;  // (kNumSums,)
  // A preference run's: the reference model (full fine-tuning, not SimPO) and the sequences'
  // reference log-probabilities of the current batch; the policy's for evaluation.
  std::optional<ParamLayout> ref_layout_;
  std::optional<Fsdp> ref_fsdp_;
  DeviceBuffer<double> ref_seq_, policy_seq_;  // (B, 2)
  const ReferenceTable* ref_table_ = nullptr;  // use_reference_table's
  PinnedBuffer<double> ref_staging_;           // (B, 2): the table's rows on their way
  std::shared_ptr<Event> ref_staging_free_;    // the last copy out of ref_staging_ has run
};

}  // namespace kiln
