// LoRA in the decoder: the adapter units' layout and PEFT's initialisation; gradients of A and B
// by finite differences for every family (all seven targets, some, rslora), also through
// dropout; the forward equals the base with W + s B A merged in; a fresh adapter (B = 0) gives
// exactly the base's loss; the frozen base gets no gradient; bf16 stays near fp32; dropout's
// masks repeat for a seed, in a recomputed forward too, and never apply in evaluation.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "common/grad_check.h"
#include "common/small_model.h"
#include "common/test_backend.h"
#include "kiln/base/error.h"
#include "kiln/model/decoder.h"
#include "kiln/model/init.h"
#include "kiln/model/lora_ops.h"
#include "kiln/model_files/lora_merge.h"
#include "kiln/model_files/lora_units.h"

namespace kiln {
namespace {

using testing::grad_batch;
using testing::randomize;
using testing::small_family_config;

constexpr ModelFamily kQwen2 = ModelFamily::kQwen2, kQwen3 = ModelFamily::kQwen3,
                      kLlama = ModelFamily::kLlama;

LoraConfig lora_config(std::vector<std::string> targets, bool rslora = false, int64_t rank = 3) {
  LoraConfig l;
  l.rank = rank;
  l.alpha = 5.0;
  l.rslora = rslora;
  l.targets = resolve_lora_targets(targets, "test");
  return l;
}
const std::vector<std::string> kAll = {"all-linear"};

// Copies the base units of `from` (a LoRA layout's store) into `to` (the plain layout's).
void copy_base(ParamStore& to, const ParamStore& from, int base_units) {
  for (int u = 0; u < base_units; ++u) {
    std::copy(from.params(u).data(), from.params(u).data() + from.params(u).size(),
              to.params(u).data());
  }
}

TEST(LoraLayout, UnitsNamesShapesAndOffsets) {
  const ModelConfig c = small_family_config(kQwen3, false, 4, 2);  // Q = 32, KV = 16, C = 16
  const LoraConfig lora = lora_config({"q_proj", "v_proj", "up_proj", "down_proj"});
  const ParamLayout plain(c), layout(c, lora);
  ASSERT_EQ(layout.num_units(), plain.num_units() + c.num_hidden_layers);
  for (int u = 0; u < plain.num_units(); ++u) EXPECT_FALSE(layout.units()[u].trainable);
  for (int u = 0; u < plain.num_units(); ++u) EXPECT_TRUE(plain.units()[u].trainable);
  const ParamUnit& u1 = layout.units()[layout.lora_unit(1)];
  EXPECT_EQ(u1.name, "layers.1.lora");
  EXPECT_TRUE(u1.trainable);
  const std::vector<std::string> names = {
      "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight",
      "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight",
      "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight",
      "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight",
      "base_model.model.model.layers.1.mlp.up_proj.lora_A.weight",
      "base_model.model.model.layers.1.mlp.up_proj.lora_B.weight",
      "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight",
      "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"};
  ASSERT_EQ(u1.entries.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(u1.entries[i].name, names[i]);
    EXPECT_TRUE(u1.entries[i].decay);
  }
  EXPECT_EQ(u1.entry(names[0]).shape, (std::vector<int64_t>{3, 16}));  // A (r, C)
  EXPECT_EQ(u1.entry(names[3]).shape, (std::vector<int64_t>{16, 3}));  // B_v (KV, r)
  EXPECT_EQ(u1.entry(names[7]).shape, (std::vector<int64_t>{16, 3}));  // B_down (C, r)
  EXPECT_EQ(u1.entry(names[6]).shape, (std::vector<int64_t>{3, 24}));  // A_down (r, I)
  const LoraOffsets& o = layout.lora_offsets();
  const LoraGroup& qkv = o.group(ProjectionGroup::kQkv);
  EXPECT_EQ(qkv.a, u1.entry(names[0]).offset);
  EXPECT_EQ(qkv.b, u1.entry(names[2]).offset);
  EXPECT_EQ(qkv.out, 32 + 2 * 16);
  EXPECT_EQ(qkv.out_begin, (std::vector<int64_t>{0, 48}));  // q at 0, v after q and k
  EXPECT_TRUE(o.group(ProjectionGroup::kO).targets.empty());
  // up after gate
  EXPECT_EQ(o.group(ProjectionGroup::kGateUp).out_begin, (std::vector<int64_t>{24}));
  size_t adapters = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l)
    adapters += layout.units()[layout.lora_unit(l)].numel;
  EXPECT_EQ(static_cast<int64_t>(adapters), lora_parameter_count(c, lora));
  EXPECT_EQ(layout.trainable_numel(), adapters);
  EXPECT_EQ(layout.find(names[5]).first, layout.lora_unit(1));
}

// A layer's adapter unit and the PEFT tensors hold the same values tensor by tensor, both ways.
TEST(LoraUnits, UnitAndPeftTensorsRoundTrip) {
  const ModelConfig c = small_family_config(kLlama, false, 4, 2);
  const LoraConfig lora = lora_config({"k_proj", "o_proj", "gate_proj"});
  const ParamLayout layout(c, lora);
  LoraTensors tensors(c, lora);
  float next = 1.0f;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (LoraTarget t : lora.targets)
      for (auto* v : {&tensors.at(l, t).a, &tensors.at(l, t).b})
        for (float& x : *v) x = next++;
  const ParamUnit& u1 = layout.units()[layout.lora_unit(1)];
  std::vector<float> unit(u1.numel, -1.0f);
  lora_unit_from_tensors(layout, tensors, 1, unit.data());
  // B_o (C, r) of layer 1 sits where the layout says, row-major as PEFT stores it.
  const ParamEntry& bo = u1.entry(peft_tensor_name(1, LoraTarget::kO, LoraFactor::kB));
  const std::vector<float>& want = tensors.at(1, LoraTarget::kO).b;
  EXPECT_EQ(std::vector<float>(unit.begin() + bo.offset, unit.begin() + bo.offset + bo.numel),
            want);
  for (float x : unit) EXPECT_GT(x, 0.0f);  // every element written
  LoraTensors back(c, lora);
  lora_tensors_from_unit(layout, unit.data(), 1, back);
  for (LoraTarget t : lora.targets) EXPECT_EQ(back.at(1, t), tensors.at(1, t));
  EXPECT_EQ(back.at(0, LoraTarget::kK).a, std::vector<float>(back.at(0, LoraTarget::kK).a.size()));
}

TEST(LoraInit, PeftKaimingUniformAndZeroB) {
  const ModelConfig c = small_family_config(kQwen2, true, 4, 2);
  const ParamLayout plain(c), layout(c, lora_config(kAll));
  ParamStore a(layout, testing::cpu_fp32(), false), b(layout, testing::cpu_fp32(), false);
  ParamStore p(plain, testing::cpu_fp32(), false);
  init_params(a, layout, 42);
  init_params(p, plain, 42);
  for (int u = 0; u < layout.num_units(); ++u)
    std::fill_n(b.params(u).data(), b.params(u).size(), 7.0f);
  init_lora_params(b, layout, 42);
  for (int u = 0; u < plain.num_units(); ++u) {  // the base is as without LoRA; b's untouched
    for (size_t i = 0; i < p.params(u).size(); ++i) {
      ASSERT_EQ(a.params(u).data()[i], p.params(u).data()[i]);
      ASSERT_EQ(b.params(u).data()[i], 7.0f);
    }
  }
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const int u = layout.lora_unit(l);
    for (const auto& e : layout.units()[u].entries) {
      const float* v = a.params(u).data() + e.offset;
      const bool is_b = e.name.find("lora_B") != std::string::npos;
      const double bound = 1.0 / std::sqrt(static_cast<double>(e.shape[1]));
      double ss = 0;
      for (size_t i = 0; i < e.numel; ++i) {
        ASSERT_EQ(v[i], b.params(u).data()[e.offset + i]) << e.name;  // one seed, one value
        if (is_b) {
          ASSERT_EQ(v[i], 0.0f) << e.name;
        }
        ASSERT_LE(std::fabs(v[i]), bound) << e.name;
        ss += v[i] * v[i];
      }
      // U(-b, b) has variance b^2 / 3
      if (!is_b) {
        EXPECT_NEAR(std::sqrt(ss / e.numel), bound / std::sqrt(3.0), 0.3 * bound) << e.name;
      }
    }
  }
}

struct GradCase {
  ModelFamily family;
  std::vector<std::string> targets;
  bool rslora;
  bool recompute;
};

void PrintTo(const GradCase& k, std::ostream* os) {
  *os << model_type_name(k.family);
  for (const auto& t : k.targets) *os << " " << t;
  *os << (k.rslora ? " rslora" : "") << (k.recompute ? " recompute" : "");
}

class LoraGrad : public ::testing::TestWithParam<GradCase> {};

// Every adapter tensor's gradient by finite differences (non-zero B: the random adapters), so
// the gradient runs through every layer's adapters and base input gradients.
TEST_P(LoraGrad, MatchesFiniteDifferences) {
  const GradCase k = GetParam();
  Decoder model(small_family_config(k.family, false, 4, 2), testing::cpu_fp32(),
                lora_config(k.targets, k.rslora));
  const ParamLayout& layout = model.layout();
  ParamStore store(layout, testing::cpu_fp32());
  randomize(store, layout, 11);
  const Batch batch = grad_batch(2, 9, 23, true);
  const float scale = 1.0f / static_cast<float>(batch.num_targets());
  store.zero_grads();
  const double loss_sum = model.forward_backward(batch, store, scale, k.recompute);
  EXPECT_NEAR(loss_sum, model.forward(batch, store), 1e-9 * loss_sum);
  auto loss = [&] { return scale * model.forward(batch, store); };
  for (int l = 0; l < 2; ++l) {
    const int u = layout.lora_unit(l);
    for (const auto& e : layout.units()[u].entries) {
      const double err =
          testing::fd_rel_error(loss, store.params(u).data() + e.offset,
                                store.grads(u).data() + e.offset, e.numel, 12, 1e-2f);
      EXPECT_LT(err, 5e-3) << e.name;
    }
  }
}

std::string grad_case_name(const ::testing::TestParamInfo<GradCase>& info) {
  const GradCase& k = info.param;
  std::string t = k.targets.size() == 1 ? "all" : "some";
  return std::string(model_type_name(k.family)) + "_" + t + (k.rslora ? "_rslora" : "") +
         (k.recompute ? "_recompute" : "");
}

const std::vector<std::string> kSome = {"k_proj", "v_proj", "o_proj", "gate_proj"};
INSTANTIATE_TEST_SUITE_P(
    Families, LoraGrad,
    ::testing::Values(GradCase{kQwen2, kAll, false, false}, GradCase{kQwen2, kSome, true, true},
                      GradCase{kQwen3, kAll, true, false}, GradCase{kQwen3, kSome, false, true},
                      GradCase{kLlama, kAll, false, true}, GradCase{kLlama, kSome, true, false}),
    grad_case_name);

// The base with W + s B A folded in (merge_lora) has the adapters' loss.
TEST(LoraMerge, ForwardEqualsMergedBase) {
  for (const ModelFamily f : {kQwen2, kQwen3, kLlama}) {
    for (const auto& targets : {kAll, kSome}) {
      const ModelConfig c = small_family_config(f, true, 4, 2);
      Decoder with(c, testing::cpu_fp32(), lora_config(targets, f == kQwen3)),
          plain(c, testing::cpu_fp32());
      ParamStore s(with.layout(), testing::cpu_fp32(), false);
      ParamStore m(plain.layout(), testing::cpu_fp32(), false);
      randomize(s, with.layout(), 3);
      copy_base(m, s, plain.layout().num_units());
      const Batch batch = grad_batch(2, 9, 23, true);
      const double base = plain.forward(batch, m);
      for (int l = 0; l < c.num_hidden_layers; ++l) {
        merge_lora(testing::cpu_fp32(), with.layout(),
                   m.params(plain.layout().layer_unit(l)).data(),
                   s.params(with.layout().lora_unit(l)).data());
      }
      const double adapted = with.forward(batch, s), merged = plain.forward(batch, m);
      EXPECT_NEAR(adapted, merged, 1e-5 * merged) << model_type_name(f);
      // The adapters matter: they move the loss by 100 times the tolerance above.
      EXPECT_GT(std::fabs(adapted - base), 1e-3 * base) << model_type_name(f);
    }
  }
}

// A fresh adapter (B = 0) leaves the base's loss exactly as it is, with or without recomputation.
TEST(LoraInit, FreshAdapterGivesTheBaseLossExactly) {
  for (const ModelFamily f : {kQwen2, kQwen3, kLlama}) {
    const ModelConfig c = small_family_config(f, false, 4, 2);
    Decoder with(c, testing::cpu_fp32(), lora_config(kAll)), plain(c, testing::cpu_fp32());
    ParamStore s(with.layout(), testing::cpu_fp32());
    ParamStore p(plain.layout(), testing::cpu_fp32());
    randomize(s, with.layout(), 9);
    init_lora_params(s, with.layout(), 1);
    copy_base(p, s, plain.layout().num_units());
    const Batch batch = grad_batch(2, 9, 23, true);
    EXPECT_EQ(with.forward(batch, s), plain.forward(batch, p)) << model_type_name(f);
    for (const bool recompute : {false, true}) {
      s.zero_grads();
      EXPECT_EQ(with.forward_backward(batch, s, 0.1f, recompute),
                plain.forward_backward(batch, p, 0.1f, recompute))
          << model_type_name(f);
      // With B = 0 only B gets a gradient: dA = s (dy B)^T x = 0.
      for (int l = 0; l < c.num_hidden_layers; ++l) {
        const int u = with.layout().lora_unit(l);
        double b2 = 0;
        for (const auto& e : with.layout().units()[u].entries) {
          for (size_t i = 0; i < e.numel; ++i) {
            const float g = s.grads(u).data()[e.offset + i];
            if (e.name.find("lora_A") != std::string::npos) {
              ASSERT_EQ(g, 0.0f) << e.name;
            }
            b2 += static_cast<double>(g) * g;
          }
        }
        EXPECT_GT(b2, 0.0);
      }
    }
  }
}

// A ParamStore that records what the model asks of each unit.
class RecordingAccess final : public UnitAccess {
 public:
  explicit RecordingAccess(ParamStore& inner) : inner_(inner) {}
  ConstDevPtr acquire(int unit) override { return inner_.acquire(unit); }
  void release(int unit) override { inner_.release(unit); }
  float* grad(int unit) override {
    grads.insert(unit);
    return inner_.grad(unit);
  }
  void grad_done(int unit) override { done.insert(unit); }
  ShardedTable acquire_table(int unit, int N, TableUse use) override {
    if (use != TableUse::kLookup) grads.insert(unit);
    return inner_.acquire_table(unit, N, use);
  }
  void release_table(int unit, TableUse use) override {
    inner_.release_table(unit, use);
    if (use != TableUse::kLookup) done.insert(unit);
  }
  std::set<int> grads, done;

 private:
  ParamStore& inner_;
};

// The frozen base: the model never asks for a base unit's gradient (so no base dW, norm, head or
// embedding gradient is computed anywhere), completes only the adapter units, and ParamStore
// holds no gradient buffer for the base.
TEST(LoraFrozenBase, OnlyAdaptersGetGradients) {
  for (const bool tied : {true, false}) {
    const ModelConfig c = small_family_config(kQwen3, tied, 4, 2);
    Decoder model(c, testing::cpu_fp32(), lora_config(kAll));
    ParamStore store(model.layout(), testing::cpu_fp32());
    randomize(store, model.layout(), 4);
    RecordingAccess rec(store);
    const ParamLayout plain(c);
    for (int u = 0; u < plain.num_units(); ++u) EXPECT_EQ(store.grads(u).size(), 0u);
    for (const bool recompute : {false, true}) {
      rec.grads.clear();
      rec.done.clear();
      model.forward_backward(grad_batch(2, 9, 23, true), rec, 0.1f, recompute);
      std::set<int> adapters;
      for (int l = 0; l < c.num_hidden_layers; ++l) adapters.insert(model.layout().lora_unit(l));
      EXPECT_EQ(rec.grads, adapters);
      EXPECT_EQ(rec.done, adapters);
    }
  }
}

TEST(LoraDecoder, RefusesBadSettings) {
  const ModelConfig c = small_family_config(kLlama, true, 4, 2);
  LoraConfig l = lora_config(kAll);
  l.dropout = 1.0;
  EXPECT_THROW(Decoder(c, testing::cpu_fp32(), l), Error);
  l.dropout = 0.1;
  EXPECT_NO_THROW(Decoder(c, testing::cpu_fp32(), l));
  l.rank = 0;
  EXPECT_THROW(Decoder(c, testing::cpu_fp32(), l), Error);
}

LoraConfig with_dropout(LoraConfig l, double p) {
  l.dropout = p;
  return l;
}

// Every adapter gradient (a unit's, flattened, in layer order) and the loss of one
// forward_backward with dropout seed `seed`.
struct DropoutRun {
  double loss = 0;
  std::vector<float> grads;
};
DropoutRun dropout_run(Decoder& model, ParamStore& store, const Batch& batch, uint64_t seed,
                       bool recompute) {
  store.zero_grads();
  model.set_dropout_seed(seed);
  DropoutRun r;
  r.loss = model.forward_backward(batch, store, 0.1f, recompute);
  for (int l = 0; l < model.config().num_hidden_layers; ++l) {
    const auto& g = store.grads(model.layout().lora_unit(l));
    r.grads.insert(r.grads.end(), g.data(), g.data() + g.size());
  }
  return r;
}

class LoraDropoutGrad : public ::testing::TestWithParam<GradCase> {};

// With lora.dropout 0.3 the gradients of A and B match finite differences of the training loss
// under the same seed (forward_backward's loss: forward() never drops), through every family's
// groups of one, two and three targets, with and without recomputation.
TEST_P(LoraDropoutGrad, MatchesFiniteDifferences) {
  const GradCase k = GetParam();
  Decoder model(small_family_config(k.family, false, 4, 2), testing::cpu_fp32(),
                with_dropout(lora_config(k.targets, k.rslora), 0.3));
  const ParamLayout& layout = model.layout();
  ParamStore store(layout, testing::cpu_fp32());
  randomize(store, layout, 11);
  const Batch batch = grad_batch(2, 9, 23, true);
  const float scale = 1.0f / static_cast<float>(batch.num_targets());
  model.set_dropout_seed(0x1234);
  store.zero_grads();
  model.forward_backward(batch, store, scale, k.recompute);
  std::vector<std::vector<float>> analytic;
  for (int l = 0; l < 2; ++l) {
    const auto& g = store.grads(layout.lora_unit(l));
    analytic.emplace_back(g.data(), g.data() + g.size());
  }
  // The training loss under the same masks (its gradient accumulation is not read).
  auto loss = [&] {
    model.set_dropout_seed(0x1234);  // each forward_backward advances it
    return scale * model.forward_backward(batch, store, scale, k.recompute);
  };
  for (int l = 0; l < 2; ++l) {
    const int u = layout.lora_unit(l);
    for (const auto& e : layout.units()[u].entries) {
      const double err = testing::fd_rel_error(loss, store.params(u).data() + e.offset,
                                               analytic[l].data() + e.offset, e.numel, 8, 1e-2f);
      EXPECT_LT(err, 5e-3) << e.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, LoraDropoutGrad,
                         ::testing::Values(GradCase{kQwen2, kAll, false, false},
                                           GradCase{kQwen3, kSome, true, true},
                                           GradCase{kLlama, kAll, false, true}),
                         grad_case_name);

// The same seed gives bit-identical losses and gradients, with or without recomputation (the
// recomputed forward redraws the masks); another seed gives others; dropout changes the loss;
// evaluation (forward()) never drops.
TEST(LoraDropout, SeededRepeatableRecomputedAndOffInEvaluation) {
  const ModelConfig c = small_family_config(kQwen3, false, 4, 2);
  Decoder model(c, testing::cpu_fp32(), with_dropout(lora_config(kAll), 0.3));
  Decoder plain(c, testing::cpu_fp32(), lora_config(kAll));  // dropout 0
  ParamStore store(model.layout(), testing::cpu_fp32());
  randomize(store, model.layout(), 12);
  const Batch batch = grad_batch(2, 9, 23, true);
  const DropoutRun a = dropout_run(model, store, batch, 7, false);
  const DropoutRun again = dropout_run(model, store, batch, 7, false);
  const DropoutRun recomputed = dropout_run(model, store, batch, 7, true);
  const DropoutRun other = dropout_run(model, store, batch, 8, false);
  const DropoutRun none = dropout_run(plain, store, batch, 7, false);
  EXPECT_EQ(again.loss, a.loss);
  EXPECT_EQ(again.grads, a.grads);
  EXPECT_EQ(recomputed.loss, a.loss);
  EXPECT_EQ(recomputed.grads, a.grads);
  EXPECT_NE(other.loss, a.loss);
  EXPECT_GT(testing::rel_err(other.grads.data(), a.grads.data(), a.grads.size()), 0.05);
  EXPECT_GT(std::fabs(none.loss - a.loss), 1e-3 * none.loss);
  EXPECT_EQ(model.forward(batch, store), plain.forward(batch, store));
  // Unset, the seed advances: the next call (after seed 8's) draws seed 8's successor's masks.
  const double next = model.forward_backward(batch, store, 0.1f, false);
  EXPECT_NE(next, other.loss);
  EXPECT_EQ(dropout_run(model, store, batch, next_dropout_seed(8), false).loss, next);
}

// The seeds: a micro-batch's differs with each of the run's seed, the step, the micro-step and
// the rank, and repeats for the same four; a layer's and target's streams differ from each other.
TEST(LoraDropout, SeedsSeparateStepsMicroStepsRanksLayersAndTargets) {
  const uint64_t s = lora_micro_batch_seed(42, 10, 1, 0);
  EXPECT_EQ(lora_micro_batch_seed(42, 10, 1, 0), s);
  const std::set<uint64_t> seeds = {s,
                                    lora_micro_batch_seed(43, 10, 1, 0),
                                    lora_micro_batch_seed(42, 11, 1, 0),
                                    lora_micro_batch_seed(42, 10, 0, 0),
                                    lora_micro_batch_seed(42, 10, 1, 1),
                                    lora_micro_batch_seed(42, 1, 10, 0),
                                    lora_micro_batch_seed(42, 0, 1, 10)};
  EXPECT_EQ(seeds.size(), 7u);
  std::set<uint64_t> streams;
  for (int64_t layer = 0; layer < 4; ++layer) {
    for (const auto& t : kLoraTargetNames) streams.insert(lora_dropout_seed(s, layer, t.value));
  }
  EXPECT_EQ(streams.size(), 4u * kNumLoraTargets);
}

// The bf16 checks' model: wide enough for bf16's rounding to average out.
ModelConfig bf16_check_config() {
  ModelConfig c = small_family_config(kQwen2, false, 4, 2);
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.vocab_size = 300;
  return c;
}

// Random parameters in a trained model's range (the norms left at their random values).
void randomize_trained(ParamStore& s, const ParamLayout& layout) {
  randomize(s, layout, 5);
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const auto& e : layout.units()[u].entries) {
      if (e.name.find("norm") != std::string::npos) continue;
      for (size_t i = 0; i < e.numel; ++i) s.params(u).data()[e.offset + i] *= 0.3f;
    }
  }
}

// bf16 products with dropout (the dropped inputs stored in bf16; o_proj's input is fp32) stay
// near fp32 with the same seed: the masks do not depend on the dtype.
TEST(LoraDropout, Bf16StaysNearFp32) {
  const ModelConfig c = bf16_check_config();
  const LoraConfig lora = with_dropout(lora_config(kAll, false, 8), 0.2);
  Decoder m32(c, testing::cpu_fp32(), lora), m16(c, testing::cpu_bf16(), lora);
  ParamStore s32(m32.layout(), testing::cpu_fp32()), s16(m16.layout(), testing::cpu_fp32());
  for (ParamStore* s : {&s32, &s16}) {
    randomize_trained(*s, m32.layout());
  }
  const Batch batch = grad_batch(2, 24, 300, true);
  const DropoutRun r32 = dropout_run(m32, s32, batch, 3, false);
  const DropoutRun r16 = dropout_run(m16, s16, batch, 3, true);
  const DropoutRun other = dropout_run(m32, s32, batch, 4, false);
  EXPECT_NEAR(r16.loss, r32.loss, 5e-3 * r32.loss);
  const double err = testing::rel_err(r16.grads.data(), r32.grads.data(), r32.grads.size());
  EXPECT_LT(err, 3e-2);
  // Another mask moves the gradients far more than bf16 does.
  EXPECT_GT(testing::rel_err(other.grads.data(), r32.grads.data(), r32.grads.size()), 5 * err);
}

// bf16 products (adapters gathered in bf16 too): loss and adapter gradients near fp32.
TEST(LoraBf16, StaysNearFp32) {
  const ModelConfig c = bf16_check_config();
  const LoraConfig lora = lora_config(kAll, false, 8);
  Decoder m32(c, testing::cpu_fp32(), lora), m16(c, testing::cpu_bf16(), lora);
  ParamStore s32(m32.layout(), testing::cpu_fp32()), s16(m16.layout(), testing::cpu_fp32());
  for (ParamStore* s : {&s32, &s16}) {
    randomize_trained(*s, m32.layout());
    s->zero_grads();
  }
  Batch batch = grad_batch(2, 24, 300, true);
  const float scale = 1.0f / static_cast<float>(batch.num_targets());
  const double l32 = m32.forward_backward(batch, s32, scale, false);
  const double l16 = m16.forward_backward(batch, s16, scale, true);
  EXPECT_NEAR(l16, l32, 5e-3 * l32);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const int u = m32.layout().lora_unit(l);
    for (const auto& e : m32.layout().units()[u].entries) {
      EXPECT_LT(
          testing::rel_err(s16.grads(u).data() + e.offset, s32.grads(u).data() + e.offset, e.numel),
          3e-2)
          << e.name;
    }
  }
}

}  // namespace
}  // namespace kiln
