#include "kiln/model/config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/error_of.h"
#include "kiln/base/error.h"
#include "kiln/model/layout.h"
#include "kiln/model/lora_config.h"
#include "kiln/model/phase_costs.h"
#include "kiln/model/rope_table.h"

namespace kiln {
namespace {

std::string error_of(const Json& j) {
  return testing::error_of([&] { config_from_json(j, "cfg.json"); });
}

TEST(Config, RoundTripsThroughJson) {
  ModelConfig c = preset_config("qwen2.5-0.5b");
  ModelConfig d = config_from_json(config_to_json(c), "x");
  EXPECT_EQ(d.hidden_size, 896);
  EXPECT_EQ(d.num_key_value_heads, 2);
  EXPECT_TRUE(d.tie_word_embeddings);
  EXPECT_EQ(d.rope_theta, 1000000.0);
  EXPECT_NEAR(parameter_count(c) / 1e6, 494.0, 1.0);  // Qwen2.5-0.5B: 494M parameters
  EXPECT_NEAR(parameter_count(preset_config("qwen2.5-1.5b")) / 1e9, 1.54, 0.01);
}

TEST(Config, ParameterCountTextShowsSmallCounts) {
  EXPECT_EQ(parameter_count_text(1543714304), "1.54B");
  EXPECT_EQ(parameter_count_text(494032768), "494.0M");
  EXPECT_EQ(parameter_count_text(73728), "73.7K");  // a LoRA run's adapters, not "0.0M"
  EXPECT_EQ(parameter_count_text(96), "96");
}

TEST(Config, RejectsOtherModels) {
  Json j = config_to_json(preset_config("tiny"));
  j["model_type"] = "gpt2";
  {
    std::string e = error_of(j);
    EXPECT_NE(e.find("cfg.json"), std::string::npos);
    EXPECT_NE(e.find("gpt2"), std::string::npos);
  }
  j = config_to_json(preset_config("tiny"));
  j["model_type"] = "llama";  // with Qwen2ForCausalLM
  EXPECT_NE(error_of(j).find("Qwen2ForCausalLM"), std::string::npos);
}

// The published shapes (the models' config.json) and their parameter counts.
TEST(Config, FamilyPresetsHaveThePublishedShapes) {
  const ModelConfig q = preset_config("qwen3-0.6b");
  EXPECT_EQ(q.family, ModelFamily::kQwen3);
  EXPECT_TRUE(q.qk_norm);
  EXPECT_FALSE(q.attention_bias);
  EXPECT_EQ(q.head_dim(), 128);
  EXPECT_EQ(q.q_dim(), 2048);  // not hidden_size (1024)
  const ParamLayout layout(q);
  EXPECT_EQ(layout.units()[1].entry("model.layers.0.self_attn.q_proj.weight").shape,
            (std::vector<int64_t>{2048, 1024}));
  EXPECT_EQ(layout.units()[1].entry("model.layers.0.self_attn.o_proj.weight").shape,
            (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(layout.units()[1].entry("model.layers.0.self_attn.k_norm.weight").shape,
            (std::vector<int64_t>{128}));
  EXPECT_NEAR(parameter_count(q) / 1e6, 596.0, 1.0);  // Qwen3-0.6B: 0.6B, 0.44B non-embedding
  EXPECT_NEAR(parameter_count(preset_config("qwen3-8b")) / 1e9, 8.19, 0.01);
  EXPECT_FALSE(preset_config("qwen3-8b").tie_word_embeddings);
  const ModelConfig l = preset_config("llama-3.2-1b");
  EXPECT_EQ(l.family, ModelFamily::kLlama);
  EXPECT_FALSE(l.attention_bias);
  EXPECT_FALSE(l.qk_norm);
  EXPECT_EQ(l.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(l.rope_scaling.factor, 32.0);
  EXPECT_EQ(l.rms_norm_eps, 1e-5);
  EXPECT_NEAR(parameter_count(l) / 1e9, 1.236, 0.001);
  EXPECT_NEAR(parameter_count(preset_config("llama-3.1-8b")) / 1e9, 8.03, 0.01);
  EXPECT_EQ(preset_config("llama-3.1-8b").rope_scaling.factor, 8.0);
}

TEST(Config, EveryFamilyRoundTripsThroughJson) {
  for (const char* name :
       {"qwen2.5-0.5b", "qwen3-0.6b", "qwen3-8b", "llama-3.2-1b", "tiny-llama"}) {
    const ModelConfig c = preset_config(name);
    const Json j = config_to_json(c);
    const ModelConfig d = config_from_json(j, name);
    EXPECT_EQ(config_to_json(d), j) << name;
    EXPECT_EQ(d.head_dim(), c.head_dim()) << name;
    EXPECT_EQ(d.qk_norm, c.qk_norm) << name;
    EXPECT_EQ(d.attention_bias, c.attention_bias) << name;
    EXPECT_EQ(d.rope_scaling.original_max_position_embeddings,
              c.rope_scaling.original_max_position_embeddings)
        << name;
  }
  EXPECT_EQ(config_to_json(preset_config("qwen3-0.6b"))["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(config_to_json(preset_config("llama-3.2-1b"))["model_type"], "llama");
}

// What kiln does not do is refused in one line naming the field and its value.
TEST(Config, RefusesWhatItDoesNotDo) {
  const Json llama = config_to_json(preset_config("llama-3.2-1b"));
  const Json qwen3 = config_to_json(preset_config("qwen3-0.6b"));
  struct Bad {
    Json base;
    const char* field;
    Json value;
    std::vector<std::string> named;
  };
  const std::vector<Bad> cases = {
      {llama, "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}, {"rope_type", "yarn"}},
      {llama, "rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}, {"rope_type", "dynamic"}},
      {llama, "mlp_bias", true, {"mlp_bias", "true"}},
      {qwen3, "num_experts", 128, {"num_experts", "128"}},
      {qwen3, "use_sliding_window", true, {"sliding_window"}},
      {llama, "hidden_act", "gelu", {"hidden_act", "gelu"}},
  };
  for (const Bad& b : cases) {
    Json j = b.base;
    j[b.field] = b.value;
    if (std::string(b.field) == "use_sliding_window") j["sliding_window"] = 4096;
    const std::string e = error_of(j);
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    for (const auto& n : b.named) EXPECT_NE(e.find(n), std::string::npos) << b.field << ": " << e;
  }
  // A window no shorter than the context never binds: accepted, as is Qwen2.5's.
  Json j = qwen3;
  j["use_sliding_window"] = true;
  j["sliding_window"] = 40960;
  EXPECT_EQ(error_of(j), "");
  j = llama;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(config_from_json(j, "x").rope_scaling.type, RopeScaling::Type::kLinear);
  // transformers 5's rope_parameters carry the same, and rope_theta.
  j = llama;
  j["rope_parameters"] = j["rope_scaling"];
  j["rope_parameters"]["rope_theta"] = 123456.0;
  j.erase("rope_scaling");
  j.erase("rope_theta");
  const ModelConfig p = config_from_json(j, "x");
  EXPECT_EQ(p.rope_theta, 123456.0);
  EXPECT_EQ(p.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(p.rope_scaling.factor, 32.0);
  j = qwen3;
  j["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_NE(error_of(j).find("sliding_attention"), std::string::npos);
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
    const ModelConfig c = preset_config(name);
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
  const ModelConfig c = preset_config("qwen2.5-0.5b");
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

// A LoRA step's FLOPs (kiln bench train --lora): the frozen base's products forward and input
// gradients only (4 per matmul parameter and token, the head over its rows), the adapters' 6 per
// parameter and token, attention as in full fine-tuning; the optimizer steps the adapters only.
TEST(PhaseCosts, LoraStepCountsNoBaseWeightGradients) {
  const ModelConfig c = preset_config("qwen2.5-0.5b");  // C 896, I 4864, Q 896, KV 128, 24 layers
  LoraConfig lora;
  lora.rank = 16;
  lora.targets = resolve_lora_targets({"all-linear"}, "test");
  const double N = 512, T = 256, rows = 510, r = 16, C = 896, I = 4864, Q = 896, KV = 128;
  const double L = 24, V = 151936;
  const double layer_matmul = C * (Q + 2 * KV) + Q * C + 2 * C * I + I * C;
  // r (in + out) per target: q, k, v, o, gate, up, down
  const double adapters = L * r * ((C + Q) + 2 * (C + KV) + (Q + C) + 2 * (C + I) + (I + C));
  ASSERT_DOUBLE_EQ(adapters, static_cast<double>(lora_parameter_count(c, lora)));
  const double attention = L * 3 * 2 * 2 * (T / 2) * Q * N;
  EXPECT_DOUBLE_EQ(train_flops(c, 512, 256, 510, &lora),
                   4 * N * L * layer_matmul + 4 * rows * V * C + 6 * N * adapters + attention);
  EXPECT_DOUBLE_EQ(train_flops(c, 512, 256, 510),
                   6 * N * L * layer_matmul + 6 * rows * V * C + attention);
  const StepShape s{.tokens = 512, .seq = 256, .head_rows = 510, .lora = &lora};
  const PhaseCosts p = phase_costs(c, s);
  const auto at = [&p](Phase ph) { return p[static_cast<int>(ph)]; };
  EXPECT_DOUBLE_EQ(at(Phase::kLmHead).flops, 4 * rows * V * C);
  EXPECT_DOUBLE_EQ(at(Phase::kOptimizer).bytes, 40 * adapters);
  const PhaseCosts full = phase_costs(c, {.tokens = 512, .seq = 256, .head_rows = 510});
  // No dw of a base product or the head, the adapters' state only; attention alike.
  for (Phase ph : {Phase::kGemm, Phase::kLmHead, Phase::kOptimizer}) {
    EXPECT_LT(at(ph).bytes, full[static_cast<int>(ph)].bytes) << phase_name(ph);
  }
  EXPECT_DOUBLE_EQ(at(Phase::kAttention).bytes, full[static_cast<int>(Phase::kAttention)].bytes);
  EXPECT_GT(at(Phase::kOther).bytes, 0);
}

// Qwen3's layers hold q_norm and k_norm (head_dim) and no biases; Llama's neither.
TEST(Layout, FamiliesHoldTheirTensors) {
  const ParamLayout q3(preset_config("tiny-qwen3")), ll(preset_config("tiny-llama"));
  const auto names = [](const ParamLayout& l) {
    std::vector<std::string> out;
    for (const auto& e : l.units()[1].entries) out.push_back(e.name);
    return out;
  };
  const std::string p = "model.layers.0.";
  EXPECT_EQ(names(q3),
            (std::vector<std::string>{
                p + "input_layernorm.weight", p + "self_attn.q_proj.weight",
                p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight",
                p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight",
                p + "self_attn.o_proj.weight", p + "post_attention_layernorm.weight",
                p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight"}));
  EXPECT_EQ(names(ll).size(), 9u);
  EXPECT_EQ(ll.find(p + "self_attn.q_proj.bias").first, -1);
  EXPECT_FALSE(q3.units()[1].entry(p + "self_attn.q_norm.weight").decay);
  EXPECT_EQ(q3.layer_offsets().bq, LayerOffsets::kNoTensor);
  EXPECT_EQ(ll.layer_offsets().q_norm, LayerOffsets::kNoTensor);
  EXPECT_EQ(static_cast<int64_t>(q3.total_numel()), parameter_count(preset_config("tiny-qwen3")));
}

TEST(Layout, UnitsAndOffsets) {
  ModelConfig c = preset_config("tiny");
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

// llama3 scaling: frequencies whose wavelength is under original / high_freq_factor kept, over
// original / low_freq_factor divided by factor, between them interpolated (tiny-llama's
// original context of 64 puts its head_dim 16 frequencies in all three bands); linear divides.
TEST(RopeFrequencies, Llama3BandsAndLinear) {
  ModelConfig c = preset_config("tiny-llama");
  const RopeScaling r = c.rope_scaling;
  const std::vector<double> f = rope_inv_freq(c);
  ASSERT_EQ(f.size(), 8u);
  int kept = 0, divided = 0, between = 0;
  for (size_t d = 0; d < f.size(); ++d) {
    const double base = std::pow(c.rope_theta, -2.0 * d / 16);
    const double wavelen = 2 * M_PI / base;
    const double old_ctx = static_cast<double>(r.original_max_position_embeddings);
    if (wavelen < old_ctx / r.high_freq_factor) {
      EXPECT_EQ(f[d], base) << d;
      ++kept;
    } else if (wavelen > old_ctx / r.low_freq_factor) {
      EXPECT_DOUBLE_EQ(f[d], base / r.factor) << d;
      ++divided;
    } else {
      const double smooth = (old_ctx / wavelen - 1.0) / (4.0 - 1.0);
      EXPECT_DOUBLE_EQ(f[d], (1 - smooth) * base / r.factor + smooth * base) << d;
      EXPECT_GT(f[d], base / r.factor);
      EXPECT_LT(f[d], base);
      ++between;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(between, 0);
  c.rope_scaling = {RopeScaling::Type::kLinear, 2.0};
  const std::vector<double> lin = rope_inv_freq(c);
  c.rope_scaling = {};
  const std::vector<double> none = rope_inv_freq(c);
  for (size_t d = 0; d < lin.size(); ++d) {
    EXPECT_EQ(none[d], std::pow(c.rope_theta, -2.0 * d / 16));
    EXPECT_EQ(lin[d], none[d] / 2.0);
  }
}

}  // namespace
}  // namespace kiln
