// Optimizers over flat parameter shards. Each rank steps only the [begin, end) slice of every
// unit that it owns (the whole unit at world size 1); weight decay applies per element according
// to the unit layout (matrices decay, norms and biases do not). Frozen units (not
// ParamUnit::trainable: a LoRA run's base) have no state and are never stepped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kernels/device/device_buffer.h"
#include "kiln/kernels/ops.h"
#include "kiln/model/layout.h"
#include "kiln/train/optimizer_kind.h"
#include "kiln/train/recipe.h"

namespace kiln {

struct OptimizerSettings {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW
  double momentum = 0.0;                          // SGD
};

// The recipe's optimizer.* keys (the trainer's and the memory plan's).
OptimizerSettings optimizer_settings(const Recipe& r);

// The update runs as backend ops (adamw_step, sgd_step) on device shards; the state lives in
// device memory of the same backend.
class Optimizer {
 public:
  Optimizer(const OptimizerSettings& s, const ParamLayout& layout, std::vector<ShardRange> shards,
            const Backend& backend);

  // Call once per optimizer step, before the units' step() calls.
  void begin_step() { ++t_; }
  // params/grads: this rank's shard of `unit` (shards[unit].size() floats), device memory; the
  // unit must be trainable.
  void step(int unit, float* params, const float* grads, double lr);

  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }
  // State buffers per unit (AdamW: m and v; SGD with momentum: m), for checkpoints.
  DeviceBuffer<float>& m(int unit) { return m_[unit]; }
  DeviceBuffer<float>& v(int unit) { return v_[unit]; }
  const DeviceBuffer<float>& m(int unit) const { return m_[unit]; }
  const DeviceBuffer<float>& v(int unit) const { return v_[unit]; }

 private:
  OptimizerSettings s_;
  const Backend& be_;
  std::vector<ShardRange> shards_;
  // Per unit: runs of (offset within shard, length, decays) covering the shard.
  struct Run {
    size_t off, len;
    bool decay;
  };
  std::vector<std::vector<Run>> runs_;
  std::vector<bool> trainable_;
  std::vector<DeviceBuffer<float>> m_, v_;
  int64_t t_ = 0;
};

struct ScheduleSettings {
  ScheduleKind kind = ScheduleKind::kConstant;
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.0;
};

// Learning rate of 0-based optimizer step `step` of `total`: linear warmup over the first
// warmup_steps (lr * (step + 1) / warmup_steps), then constant, or linear / cosine decay from lr
// to lr * min_lr_ratio at the last step.
double lr_at(const ScheduleSettings& s, double peak_lr, int64_t step, int64_t total);

}  // namespace kiln
