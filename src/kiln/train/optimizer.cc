#include "kiln/train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kiln/base/error.h"

namespace kiln {

OptimizerSettings optimizer_settings(const Recipe& r) {
  OptimizerSettings os;
  os.kind = r.optimizer.name;
  os.weight_decay = r.optimizer.weight_decay;
  os.beta1 = r.optimizer.betas[0];
  os.beta2 = r.optimizer.betas[1];
  os.eps = r.optimizer.eps;
  os.momentum = r.optimizer.momentum;
  return os;
}

Optimizer::Optimizer(const OptimizerSettings& s, const ParamLayout& layout,
                     std::vector<ShardRange> shards, const Backend& backend)
    : s_(s), be_(backend), shards_(std::move(shards)) {
  KILN_CHECK(static_cast<int>(shards_.size()) == layout.num_units());
  runs_.resize(shards_.size());
  for (size_t u = 0; u < shards_.size(); ++u) {
    const ParamUnit& unit = layout.units()[u];
    // A frozen unit (a LoRA run's base) has no state and no runs: step() refuses it.
    const ShardRange r = unit.trainable ? shards_[u] : ShardRange{};
    trainable_.push_back(unit.trainable);
    for (const auto& e : unit.entries) {
      const size_t b = std::max(r.begin, e.offset), en = std::min(r.end, e.offset + e.numel);
      if (b < en) runs_[u].push_back({b - r.begin, en - b, e.decay});
    }
    const bool adam = s_.kind == OptimizerKind::kAdamW;
    m_.emplace_back(be_, adam || s_.momentum > 0 ? r.size() : 0);
    v_.emplace_back(be_, adam ? r.size() : 0);
  }
}

void Optimizer::step(int unit, float* p, const float* g, double lr) {
  KILN_CHECK(t_ > 0, "begin_step() not called");
  KILN_CHECK(trainable_[unit], "optimizer step of frozen unit {}", unit);
  float* m = m_[unit].data();
  float* v = v_[unit].data();
  if (s_.kind == OptimizerKind::kAdamW) {
    // PyTorch AdamW: p *= 1 - lr*wd; m, v moments; p -= lr * mhat / (sqrt(vhat) + eps)
    const double bc1 = 1.0 - std::pow(s_.beta1, static_cast<double>(t_));
    const double bc2 = 1.0 - std::pow(s_.beta2, static_cast<double>(t_));
    AdamWStep a;
    a.beta1 = static_cast<float>(s_.beta1);
    a.beta2 = static_cast<float>(s_.beta2);
    a.step_size = static_cast<float>(lr / bc1);
    a.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    a.eps = static_cast<float>(s_.eps);
    for (const Run& r : runs_[unit]) {
      a.decay = r.decay ? static_cast<float>(1.0 - lr * s_.weight_decay) : 1.0f;
      be_.adamw_step(p + r.off, m + r.off, v + r.off, g + r.off, r.len, a);
    }
    return;
  }
  // SGD as PyTorch's: L2 weight decay added to the gradient; momentum buffer starts at g.
  SgdStep sg;
  sg.lr = static_cast<float>(lr);
  sg.momentum = static_cast<float>(s_.momentum);
  sg.first = t_ == 1;
  for (const Run& r : runs_[unit]) {
    sg.weight_decay = r.decay ? static_cast<float>(s_.weight_decay) : 0.0f;
    be_.sgd_step(p + r.off, m == nullptr ? nullptr : m + r.off, g + r.off, r.len, sg);
  }
}

double lr_at(const ScheduleSettings& s, double peak_lr, int64_t step, int64_t total) {
  if (step < s.warmup_steps) {
    return peak_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  }
  if (s.kind == ScheduleKind::kConstant) return peak_lr;
  const int64_t span = std::max<int64_t>(1, total - 1 - s.warmup_steps);
  const double progress = std::clamp(static_cast<double>(step - s.warmup_steps) / span, 0.0, 1.0);
  const double f = s.kind == ScheduleKind::kLinear
                       ? 1.0 - progress
                       : 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return peak_lr * (s.min_lr_ratio + (1.0 - s.min_lr_ratio) * f);
}

}  // namespace kiln
