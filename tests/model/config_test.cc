#include "kiln/model/config.h"

#include <gtest/gtest.h>

#include "kiln/base/error.h"
#include "kiln/model/layout.h"
#include "kiln/model/phase_costs.h"

namespace kiln {
namespace {

std::string error_of(const Json& j) {
  try {
    config_from_json(j, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, RoundTripsThroughJson) {
  Qwen2Config c = preset_config("qwen2.5-0.5b");
  Qwen2Config d = config_from_json(config_to_json(c), "x");
  EXPECT_EQ(d.hidden_size, 896);
  EXPECT_EQ(d.num_key_value_heads, 2);
  EXPECT_TRUE(d.tie_word_embeddings);
  EXPECT_EQ(d.rope_theta, 1000000.0);
  EXPECT_NEAR(parameter_count(c) / 1e6, 494.0, 1.0);  // Qwen2.5-0.5B: 494M parameters
  EXPECT_NEAR(parameter_count(preset_config("qwen2.5-1.5b")) / 1e9, 1.54, 0.01);
}

TEST(Config, RejectsOtherModels) {
  Json j = config_to_json(preset_config("tiny"));
  j["model_type"] = "llama";
  {
    std::string e = error_of(j);
    EXPECT_NE(e.find("cfg.json"), std::string::npos);
    EXPECT_NE(e.find("llama"), std::string::npos);
  }
}

TEST(Config, NamesMissingAndBadFields) {
  Json j = config_to_json(preset_config("tiny"));
  j.erase("hidden_size");
  EXPECT_NE(error_of(j).find("hidden_size"), std::string::npos);
  j = config_to_json(preset_config("tiny"));
  j["num_attention_heads"] = "four";
  EXPECT_NE(error_of(j).find("num_attention_heads"), std::string::npos);
  j = config_to_json(preset_config("tiny"));
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_of(j).find("num_key_value_heads"), std::string::npos);
}

TEST(Config, UnknownPreset) { EXPECT_THROW(preset_config("gpt2"), Error); }

// The GPU check's tiny models reach the flash attention kernels (head_dim 64 and 128, grouped
// query heads) with a vocabulary the demo tokens fit.
TEST(Config, TinyPresetsWithFlashHeadDims) {
  for (const auto& [name, D] : {std::pair{"tiny-hd64", 64}, {"tiny-hd128", 128}}) {
    const Qwen2Config c = preset_config(name);
    EXPECT_EQ(c.head_dim(), D) << name;
    EXPECT_EQ(c.num_attention_heads % c.num_key_value_heads, 0) << name;
    EXPECT_GT(c.num_attention_heads, c.num_key_value_heads) << name;
    EXPECT_EQ(c.vocab_size, preset_config("tiny").vocab_size) << name;
    EXPECT_LT(parameter_count(c), 3'000'000) << name;
  }
  EXPECT_EQ(preset_config("tiny").head_dim(), 16);  // the reference kernels' case
}

// phase_costs: MFU's FLOPs are the products, the LM head and attention without recomputation;
// recomputation adds one forward; every phase moves bytes.
TEST(PhaseCosts, SumToTrainFlopsAndGrowWithRecompute) {
  const Qwen2Config c = preset_config("qwen2.5-0.5b");
  const StepShape s{.tokens = 4096, .seq = 2048, .head_rows = 4000, .act_bytes = 2};
  const PhaseCosts p = phase_costs(c, s);
  const auto at = [](const PhaseCosts& x, Phase ph) { return x[static_cast<int>(ph)]; };
  EXPECT_DOUBLE_EQ(
      at(p, Phase::kGemm).flops + at(p, Phase::kLmHead).flops + at(p, Phase::kAttention).flops,
      train_flops(c, 4096, 2048, 4000));
  // 6 x V x C x rows for the head, by hand.
  EXPECT_DOUBLE_EQ(at(p, Phase::kLmHead).flops, 6.0 * 151936 * 896 * 4000);
  StepShape r = s;
  r.recompute = true;
  const PhaseCosts q = phase_costs(c, r);
  // One more forward of the layers: 8/6 of the products' FLOPs, 4/3 of attention's.
  EXPECT_DOUBLE_EQ(at(q, Phase::kGemm).flops, at(p, Phase::kGemm).flops * 8 / 6);
  EXPECT_DOUBLE_EQ(at(q, Phase::kAttention).flops, at(p, Phase::kAttention).flops * 4 / 3);
  EXPECT_EQ(at(q, Phase::kLmHead).flops, at(p, Phase::kLmHead).flops);
  for (int i = 0; i < kNumPhases; ++i) {
    EXPECT_GT(p[i].bytes, 0) << i;
    EXPECT_GT(q[i].bytes, p[i].bytes * (i == static_cast<int>(Phase::kGemm) ? 1.0 : 0.99)) << i;
  }
  // The optimizer reads and writes 40 bytes per parameter; fp32 inputs move more than bf16.
  EXPECT_DOUBLE_EQ(at(p, Phase::kOptimizer).bytes, 40.0 * parameter_count(c));
  StepShape f = s;
  f.act_bytes = 4;
  EXPECT_GT(at(phase_costs(c, f), Phase::kGemm).bytes, at(p, Phase::kGemm).bytes);
}

TEST(Layout, UnitsAndOffsets) {
  Qwen2Config c = preset_config("tiny");
  ParamLayout tied(c);
  EXPECT_EQ(tied.num_units(), 2 + c.num_hidden_layers);
  EXPECT_EQ(tied.units().back().entries.size(), 1u);  // only model.norm.weight
  EXPECT_EQ(static_cast<int64_t>(tied.total_numel()), parameter_count(c));
  c.tie_word_embeddings = false;
  ParamLayout untied(c);
  // The untied LM head's table is a unit of its own, after the final norm's.
  ASSERT_EQ(untied.num_units(), 3 + c.num_hidden_layers);
  EXPECT_EQ(untied.units()[untied.head_unit()].entries.size(), 1u);
  EXPECT_EQ(untied.units()[untied.lm_head_unit()].name, "lm_head");
  EXPECT_EQ(untied.units()[untied.lm_head_unit()].entries.at(0).name, "lm_head.weight");
  EXPECT_EQ(tied.lm_head_unit(), tied.embed_unit());
  EXPECT_EQ(tied.head_unit(), 1 + static_cast<int>(c.num_hidden_layers));
  EXPECT_EQ(static_cast<int64_t>(untied.total_numel()), parameter_count(c));
  auto [u, e] = untied.find("model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(u, 2);
  EXPECT_FALSE(untied.units()[u].entries[e].shape.empty());
  EXPECT_FALSE(untied.units()[1].entry("model.layers.0.self_attn.q_proj.bias").decay);
  EXPECT_TRUE(untied.units()[1].entry("model.layers.0.self_attn.q_proj.weight").decay);
}

}  // namespace
}  // namespace kiln
