#include "kiln/model/lora_config.h"

#include <gtest/gtest.h>

#include "common/error_of.h"

namespace kiln {
namespace {

using testing::error_of;

TEST(LoraConfig, ScaleIsAlphaOverRankOrOverItsRoot) {
  LoraConfig c;
  c.rank = 16;
  c.alpha = 32;
  EXPECT_DOUBLE_EQ(c.scale(), 2.0);
  c.rslora = true;
  EXPECT_DOUBLE_EQ(c.scale(), 8.0);
}

TEST(LoraConfig, AllLinearNamesEveryProjectionInLayerOrder) {
  const auto t = resolve_lora_targets({"all-linear"}, "r.yaml: lora");
  EXPECT_EQ(lora_target_names(t), (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj",
                                                            "gate_proj", "up_proj", "down_proj"}));
  // Order and repeats in the input do not matter.
  EXPECT_EQ(lora_target_names(resolve_lora_targets({"v_proj", "q_proj", "v_proj"}, "x")),
            (std::vector<std::string>{"q_proj", "v_proj"}));
}

TEST(LoraConfig, UnknownTargetNamesItAndTheAllowedOnes) {
  const std::string e = error_of([] {
    resolve_lora_targets({"q_proj", "c_attn"}, "r.yaml: lora");
  });
  EXPECT_NE(e.find("r.yaml: lora"), std::string::npos) << e;
  EXPECT_NE(e.find("'c_attn'"), std::string::npos) << e;
  EXPECT_NE(e.find("down_proj"), std::string::npos) << e;
  EXPECT_NE(error_of([] { resolve_lora_targets({"all-linear", "q_proj"}, "x"); }), "");
}

TEST(LoraConfig, ValidateNamesTheKey) {
  LoraConfig c;
  c.targets = {LoraTarget::kQ};
  EXPECT_EQ(error_of([&] { c.validate("r.yaml: lora"); }), "");
  c.rank = 0;
  EXPECT_NE(error_of([&] { c.validate("r.yaml: lora"); }).find("'rank'"), std::string::npos);
  c.rank = 4;
  c.dropout = 1.0;
  EXPECT_NE(error_of([&] { c.validate("r.yaml: lora"); }).find("'dropout'"), std::string::npos);
  c.dropout = 0.1;
  c.targets.clear();
  EXPECT_NE(error_of([&] { c.validate("r.yaml: lora"); }).find("'targets'"), std::string::npos);
}

TEST(LoraConfig, ShapesAndCountFollowTheConfig) {
  const ModelConfig m = preset_config("qwen3-0.6b");  // C 1024, Q 2048, KV 1024, I 3072, 28 layers
  EXPECT_EQ(lora_shape(m, LoraTarget::kQ).out, 2048);
  EXPECT_EQ(lora_shape(m, LoraTarget::kO).in, 2048);
  EXPECT_EQ(lora_shape(m, LoraTarget::kK).out, 1024);
  EXPECT_EQ(lora_shape(m, LoraTarget::kDown).in, 3072);
  EXPECT_EQ(lora_module_path(LoraTarget::kGate), "mlp.gate_proj");
  LoraConfig c;
  c.rank = 16;
  c.targets = resolve_lora_targets({"all-linear"}, "x");
  // Per layer: q 16*(1024+2048), k and v 16*(1024+1024) each, o 16*(2048+1024),
  // gate and up 16*(1024+3072) each, down 16*(3072+1024).
  const int64_t per_layer = 16 * (3072 + 2048 * 2 + 3072 + 4096 * 3);
  EXPECT_EQ(lora_parameter_count(m, c), per_layer * 28);
}

}  // namespace
}  // namespace kiln
