#include "kiln/train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/test_backend.h"
#include "kiln/model/layout.h"

namespace kiln {
namespace {

ModelConfig cfg() {
  ModelConfig c;
  c.hidden_size = 8;
  c.intermediate_size = 8;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.vocab_size = 5;
  c.tie_word_embeddings = true;
  return c;
}

std::vector<ShardRange> whole(const ParamLayout& l) {
  std::vector<ShardRange> s;
  for (const auto& u : l.units()) s.push_back({0, u.numel});
  return s;
}

// Scalar double-precision AdamW as written in the paper / PyTorch docs.
struct RefAdamW {
  double m = 0, v = 0;
  double step(double p, double g, int t, double lr, double wd, double b1, double b2, double eps) {
    p *= 1 - lr * wd;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double mh = m / (1 - std::pow(b1, t)), vh = v / (1 - std::pow(b2, t));
    return p - lr * mh / (std::sqrt(vh) + eps);
  }
};

TEST(AdamW, MatchesReferenceAndSkipsDecayOnNormsAndBiases) {
  ParamLayout layout(cfg());
  OptimizerSettings s;
  s.weight_decay = 0.1;
  s.beta1 = 0.8;
  s.beta2 = 0.95;
  s.eps = 1e-6;
  Optimizer opt(s, layout, whole(layout), testing::cpu_fp32());
  const int u = layout.layer_unit(0);
  const size_t n = layout.units()[u].numel;
  std::vector<float> p(n), g(n);
  std::vector<double> pref(n);
  std::vector<RefAdamW> ref(n);
  for (size_t i = 0; i < n; ++i) pref[i] = p[i] = 0.5f + 0.01f * static_cast<float>(i % 17);
  // Decay mask by name: only 2-D weight matrices decay.
  std::vector<bool> decays(n, false);
  int no_decay_entries = 0;
  for (const auto& e : layout.units()[u].entries) {
    const bool is_matrix = e.name.ends_with("_proj.weight");
    no_decay_entries += !is_matrix;
    for (size_t i = e.offset; i < e.offset + e.numel; ++i) decays[i] = is_matrix;
  }
  EXPECT_EQ(no_decay_entries, 5);  // two norms, three biases
  for (int t = 1; t <= 5; ++t) {
    for (size_t i = 0; i < n; ++i) g[i] = std::sin(0.3f * i + t);
    opt.begin_step();
    opt.step(u, p.data(), g.data(), 1e-2);
    for (size_t i = 0; i < n; ++i) {
      pref[i] = ref[i].step(pref[i], g[i], t, 1e-2, decays[i] ? 0.1 : 0.0, 0.8, 0.95, 1e-6);
    }
  }
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], pref[i], 2e-6) << i;
}

TEST(AdamW, ShardStepsEqualWholeStep) {
  ParamLayout layout(cfg());
  OptimizerSettings s;
  s.weight_decay = 0.05;
  const int u = layout.layer_unit(0);
  const size_t n = layout.units()[u].numel;
  Optimizer whole_opt(s, layout, whole(layout), testing::cpu_fp32());
  auto halves = whole(layout);
  std::vector<ShardRange> lo = halves, hi = halves;
  lo[u] = {0, n / 3};
  hi[u] = {n / 3, n};
  Optimizer a(s, layout, lo, testing::cpu_fp32()), b(s, layout, hi, testing::cpu_fp32());
  std::vector<float> p1(n, 1.0f), p2(n, 1.0f), g(n);
  for (size_t i = 0; i < n; ++i) g[i] = std::cos(0.7f * i);
  whole_opt.begin_step();
  whole_opt.step(u, p1.data(), g.data(), 0.1);
  a.begin_step();
  b.begin_step();
  a.step(u, p2.data(), g.data(), 0.1);
  b.step(u, p2.data() + n / 3, g.data() + n / 3, 0.1);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(p1[i], p2[i]);
}

TEST(Sgd, MomentumAndWeightDecay) {
  ParamLayout layout(cfg());
  OptimizerSettings s;
  s.kind = OptimizerKind::kSgd;
  s.momentum = 0.9;
  s.weight_decay = 0.0;
  Optimizer opt(s, layout, whole(layout), testing::cpu_fp32());
  const int u = layout.embed_unit();
  std::vector<float> p(layout.units()[u].numel, 1.0f), g(p.size(), 0.5f);
  opt.begin_step();
  opt.step(u, p.data(), g.data(), 0.1);
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.1f * 0.5f);  // buf = g
  opt.begin_step();
  opt.step(u, p.data(), g.data(), 0.1);
  EXPECT_FLOAT_EQ(p[0], 0.95f - 0.1f * (0.9f * 0.5f + 0.5f));
}

TEST(Schedule, WarmupThenDecay) {
  ScheduleSettings s;
  s.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(lr_at(s, 1.0, 0, 10), 0.25);
  EXPECT_DOUBLE_EQ(lr_at(s, 1.0, 3, 10), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(s, 1.0, 9, 10), 1.0);  // constant
  s.kind = ScheduleKind::kLinear;
  s.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(lr_at(s, 1.0, 4, 10), 1.0);
  EXPECT_NEAR(lr_at(s, 1.0, 9, 10), 0.1, 1e-12);
  EXPECT_NEAR(lr_at(s, 1.0, 6, 10), 0.1 + 0.9 * (1 - 2.0 / 5), 1e-12);
  s.kind = ScheduleKind::kCosine;
  s.min_lr_ratio = 0.0;
  EXPECT_DOUBLE_EQ(lr_at(s, 2.0, 4, 10), 2.0);
  EXPECT_NEAR(lr_at(s, 2.0, 9, 10), 0.0, 1e-12);
  EXPECT_NEAR(lr_at(s, 2.0, 6, 10), 2.0 * 0.5 * (1 + std::cos(M_PI * 2 / 5)), 1e-12);
}

}  // namespace
}  // namespace kiln
