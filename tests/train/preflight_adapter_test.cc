// model.adapter is checked before any worker starts: the adapter agrees with the lora section and
// fits model.path, or kiln train stops in one line naming the key, the file and the field.
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "common/temp_dir.h"
#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/model/config.h"
#include "kiln/train/preflight.h"

namespace kiln {
namespace {

const fs::path kFixture = fs::path(KILN_SOURCE_DIR) / "tests/fixtures/peft_tiny_adapter";

class PreflightAdapter : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ / "model");
    model("tiny-qwen3");
  }

  void model(const std::string& preset) {
    write_file_atomic(dir_ / "model/config.json", config_to_json(preset_config(preset)).dump());
  }

  // The message of preflight_checks' error for a recipe with `lora` and `adapter`.
  std::string error_of(const std::string& lora, const fs::path& adapter) {
    const Recipe r = parse_recipe(
        fmt::format("model: {{path: {}, adapter: {}}}\nlora: {}\ndata: {{train: {}}}\noutput: "
                    "{{dir: {}}}\n",
                    (dir_ / "model").string(), adapter.string(), lora,
                    (dir_ / "none.jsonl").string(), (dir_ / "out").string()),
        "r.yaml", dir_);
    return testing::error_of([&] { preflight_checks(r); });
  }

  testing::TempDir tmp_{"kiln_preflight_adapter"};
  const fs::path dir_ = tmp_.path();
};

constexpr const char* kMatching = "{rank: 4, alpha: 8, targets: [q_proj, v_proj]}";

TEST_F(PreflightAdapter, AMatchingAdapterPassesOnToTheData) {
  // The adapter is fine; the next check, the missing data file, is what fails.
  EXPECT_NE(error_of(kMatching, kFixture).find("data.train: "), std::string::npos);
}

TEST_F(PreflightAdapter, TheRecipeMustAgreeWithIt) {
  EXPECT_EQ(error_of("{rank: 16, alpha: 8, targets: [q_proj, v_proj]}", kFixture),
            "model.adapter: " + (kFixture / "adapter_config.json").string() +
                ": r is 4, but the recipe's lora.rank is 16");
  EXPECT_EQ(error_of("{rank: 4, alpha: 8}", kFixture),
            "model.adapter: " + (kFixture / "adapter_config.json").string() +
                ": target_modules is [q_proj, v_proj], but the recipe's lora.targets is [q_proj, "
                "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]");
}

TEST_F(PreflightAdapter, ItMustFitTheBase) {
  model("tiny");  // q_proj (64, 64)
  EXPECT_EQ(error_of(kMatching, kFixture),
            "model.adapter: " + (kFixture / "adapter_model.safetensors").string() +
                ": tensor base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight has "
                "shape [256, 4], expected [64, 4] (out, r) (r 4 in adapter_config.json)");
}

TEST_F(PreflightAdapter, ItMustBeAnAdapterDirectory) {
  fs::create_directories(dir_ / "empty");
  EXPECT_EQ(error_of(kMatching, dir_ / "empty"),
            "model.adapter: " + (dir_ / "empty").string() +
                ": not a PEFT adapter directory (no adapter_config.json)");
  EXPECT_EQ(
      error_of(kMatching, dir_ / "missing")
          .rfind("model.adapter: " + (dir_ / "missing").string() + " is not a directory (", 0),
      0u);
}

}  // namespace
}  // namespace kiln
