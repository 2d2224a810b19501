// Whole-model gradient checks by finite differences: tied and untied heads, GQA, biases,
// packed documents, activation recomputation on and off.
#include <gtest/gtest.h>

#include "common/grad_check.h"
#include "common/small_model.h"
#include "common/test_backend.h"
#include "kiln/base/error.h"
#include "kiln/model/decoder.h"
#include "kiln/model/init.h"

namespace kiln {
namespace {

using testing::randomize;
using testing::small_config;

using testing::grad_batch;

struct Case {
  ModelFamily family;
  bool tied;
  int heads, kv;
  bool packed;
  bool recompute;
};

class ModelGrad : public ::testing::TestWithParam<Case> {};

TEST_P(ModelGrad, MatchesFiniteDifferences) {
  const Case k = GetParam();
  Decoder model(testing::small_family_config(k.family, k.tied, k.heads, k.kv), testing::cpu_fp32());
  ParamStore store(model.layout(), testing::cpu_fp32());
  randomize(store, model.layout(), 11);
  Batch batch = grad_batch(2, 9, 23, k.packed);
  const float scale = 1.0f / static_cast<float>(batch.num_targets());
  store.zero_grads();
  const double loss_sum = model.forward_backward(batch, store, scale, k.recompute);
  EXPECT_NEAR(loss_sum, model.forward(batch, store), 1e-9 * loss_sum);
  auto loss = [&] { return scale * model.forward(batch, store); };
  for (int u = 0; u < model.layout().num_units(); ++u) {
    for (const auto& e : model.layout().units()[u].entries) {
      double err = testing::fd_rel_error(loss, store.params(u).data() + e.offset,
                                         store.grads(u).data() + e.offset, e.numel, 12, 1e-2f);
      EXPECT_LT(err, 5e-3) << e.name;
    }
  }
}

constexpr ModelFamily kQwen2 = ModelFamily::kQwen2, kQwen3 = ModelFamily::kQwen3,
                      kLlama = ModelFamily::kLlama;
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& k = info.param;
  return std::string(k.tied ? "tied" : "untied") + "_h" + std::to_string(k.heads) + "_kv" +
         std::to_string(k.kv) + (k.packed ? "_packed" : "") + (k.recompute ? "_recompute" : "");
}

INSTANTIATE_TEST_SUITE_P(Qwen2, ModelGrad,
                         ::testing::Values(Case{kQwen2, true, 4, 2, false, false},
                                           Case{kQwen2, false, 4, 4, false, false},
                                           Case{kQwen2, false, 4, 1, true, false},
                                           Case{kQwen2, true, 4, 2, true, true}),
                         case_name);
// Qwen3: q/k norms, head_dim 8 with hidden 16 and 4 heads; Llama: no biases, llama3 RoPE.
INSTANTIATE_TEST_SUITE_P(Qwen3, ModelGrad,
                         ::testing::Values(Case{kQwen3, true, 4, 2, false, false},
                                           Case{kQwen3, false, 4, 1, true, false},
                                           Case{kQwen3, false, 4, 2, true, true}),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Llama, ModelGrad,
                         ::testing::Values(Case{kLlama, true, 4, 2, false, false},
                                           Case{kLlama, false, 4, 2, true, true}),
                         case_name);

TEST(Model, RecomputationGivesIdenticalGradients) {
  for (const ModelFamily f : {kQwen2, kQwen3, kLlama}) {
    Decoder model(testing::small_family_config(f, true, 4, 2), testing::cpu_fp32());
    ParamStore a(model.layout(), testing::cpu_fp32()), b(model.layout(), testing::cpu_fp32());
    randomize(a, model.layout(), 3);
    randomize(b, model.layout(), 3);
    Batch batch = grad_batch(2, 9, 23, true);
    const double la = model.forward_backward(batch, a, 0.1f, false);
    const double lb = model.forward_backward(batch, b, 0.1f, true);
    EXPECT_EQ(la, lb) << model_type_name(f);
    for (int u = 0; u < model.layout().num_units(); ++u) {
      for (size_t i = 0; i < a.grads(u).size(); ++i)
        ASSERT_EQ(a.grads(u).data()[i], b.grads(u).data()[i]) << model_type_name(f);
    }
  }
}

TEST(Model, GradientsAccumulateAcrossCalls) {
  Decoder model(small_config(false, 4, 2), testing::cpu_fp32());
  ParamStore s(model.layout(), testing::cpu_fp32());
  randomize(s, model.layout(), 5);
  Batch batch = grad_batch(1, 6, 23, false);
  model.forward_backward(batch, s, 1.0f, false);
  std::vector<float> once(s.grads(1).data(), s.grads(1).data() + s.grads(1).size());
  model.forward_backward(batch, s, 1.0f, false);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(s.grads(1).data()[i], 2 * once[i], 1e-5);
}

TEST(Model, RejectsOutOfVocabularyTokens) {
  Decoder model(small_config(true, 4, 2), testing::cpu_fp32());
  ParamStore s(model.layout(), testing::cpu_fp32());
  Batch batch = grad_batch(1, 6, 23, false);
  batch.input_ids[2] = 23;
  EXPECT_THROW(model.forward(batch, s), Error);
}

TEST(Model, InitIsReproducibleAndShaped) {
  ModelConfig c = small_config(true, 4, 2);
  ParamLayout layout(c);
  ParamStore a(layout, testing::cpu_fp32(), false), b(layout, testing::cpu_fp32(), false);
  init_params(a, layout, 42);
  init_params(b, layout, 42);
  for (int u = 0; u < layout.num_units(); ++u) {
    for (size_t i = 0; i < a.params(u).size(); ++i)
      ASSERT_EQ(a.params(u).data()[i], b.params(u).data()[i]);
  }
  EXPECT_EQ(a.tensor("model.norm.weight")[0], 1.0f);
  EXPECT_EQ(a.tensor("model.layers.0.self_attn.q_proj.bias")[0], 0.0f);
  double ss = 0;
  const float* w = a.tensor("model.embed_tokens.weight");
  for (int i = 0; i < 23 * 16; ++i) ss += w[i] * w[i];
  EXPECT_NEAR(std::sqrt(ss / (23 * 16)), 0.02, 0.004);
}

}  // namespace
}  // namespace kiln
