// kiln against an independent reference: tools/decoder_reference.py (PyTorch autograd, float64,
// written from Hugging Face's Qwen2, Qwen3 and Llama modeling code) produced the loss and every
// parameter gradient for small random checkpoints of each family; see
// tests/fixtures/reference/README.md for the command and the cases. The LoRA cases add a PEFT
// adapter (adapter_config.json, adapter_model.safetensors) and hold the adapters' gradients; one
// trains with lora_dropout, its masks kiln's (the reference repeats the hash in numpy).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/grad_check.h"
#include "common/reference_fixture.h"
#include "common/test_backend.h"
#include "kiln/base/json.h"
#include "kiln/io/checkpoint_reader.h"
#include "kiln/model/decoder.h"
#include "kiln/model_files/hf_checkpoint.h"

namespace kiln {
namespace {

fs::path fixture(const std::string& name) {
  return fs::path(KILN_SOURCE_DIR) / "tests/fixtures/reference" / name;
}

// HF causal-LM batch: targets[t] = labels[t + 1].
Batch read_batch(const fs::path& file) {
  Json j = read_json_file(file);
  const auto& ids = j.at("input_ids");
  const auto& labels = j.at("labels");
  Batch b;
  b.resize(static_cast<int>(ids.size()), static_cast<int>(ids[0].size()));
  for (int r = 0; r < b.B; ++r) {
    for (int t = 0; t < b.T; ++t) {
      b.input_ids[r * b.T + t] = ids[r][t].get<int32_t>();
      b.positions[r * b.T + t] = t;
      if (t + 1 < b.T) b.targets[r * b.T + t] = labels[r][t + 1].get<int32_t>();
    }
  }
  return b;
}

class Reference : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(Reference, LossAndEveryGradientMatch) {
  const auto& [name, recompute] = GetParam();
  const fs::path dir = fixture(name);
  ModelConfig config = read_config(dir / "config.json");
  Decoder model(config, testing::cpu_fp32());
  ParamStore store(model.layout(), testing::cpu_fp32());
  load_hf_weights(dir, model.layout(), store);
  Batch batch = read_batch(dir / "batch.json");
  Json expected = read_json_file(dir / "expected.json");
  ASSERT_EQ(batch.num_targets(), expected.at("num_targets").get<int64_t>());

  const double loss_sum =
      model.forward_backward(batch, store, 1.0f / batch.num_targets(), recompute);
  const double loss = loss_sum / batch.num_targets();
  const double ref_loss = expected.at("loss").get<double>();
  EXPECT_NEAR(loss, ref_loss, 1e-5 * std::fabs(ref_loss));

  CheckpointReader grads(dir / "grads.safetensors");
  int checked = 0;
  for (int u = 0; u < model.layout().num_units(); ++u) {
    for (const auto& e : model.layout().units()[u].entries) {
      std::vector<float> ref(e.numel);
      grads.read_f32(e.name, e.shape, ref.data());
      const float* got = store.grads(u).data() + e.offset;
      double diff2 = 0, ref2 = 0;
      for (size_t i = 0; i < e.numel; ++i) {
        diff2 += (got[i] - static_cast<double>(ref[i])) * (got[i] - static_cast<double>(ref[i]));
        ref2 += static_cast<double>(ref[i]) * ref[i];
      }
      EXPECT_LT(std::sqrt(diff2 / ref2), 1e-4) << e.name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(grads.names().size()));
}

class LoraReference : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(LoraReference, LossAndAdapterGradientsMatch) {
  const auto& [name, recompute] = GetParam();
  const fs::path dir = fixture(name);
  const ModelConfig config = read_config(dir / "config.json");
  Decoder model(config, testing::cpu_fp32(),
                testing::read_adapter_config(dir / "adapter_config.json"));
  const ParamLayout& layout = model.layout();
  ParamStore store(layout, testing::cpu_fp32());
  testing::load_reference_model(dir, config, layout, store);
  Batch batch = read_batch(dir / "batch.json");
  const Json expected = read_json_file(dir / "expected.json");
  // With lora_dropout, the reference drew kiln's masks from this seed (in numpy).
  if (expected.contains("dropout_seed")) {
    model.set_dropout_seed(expected.at("dropout_seed").get<uint64_t>());
  }
  const double loss = model.forward_backward(batch, store, 1.0f / batch.num_targets(), recompute) /
                      batch.num_targets();
  const double ref_loss = expected.at("loss").get<double>();
  EXPECT_NEAR(loss, ref_loss, 1e-5 * std::fabs(ref_loss));
  CheckpointReader grads(dir / "grads.safetensors");
  int checked = 0;
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    const int u = layout.lora_unit(l);
    for (const auto& e : layout.units()[u].entries) {
      std::vector<float> ref(e.numel);
      grads.read_f32(e.name, e.shape, ref.data());
      EXPECT_LT(testing::rel_err(store.grads(u).data() + e.offset, ref.data(), e.numel), 1e-4)
          << e.name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(grads.names().size()));
}

// Qwen2 (biases, all seven targets), Qwen3 (q/k norms, some targets, rslora), Llama 3 (llama3
// RoPE, k/gate/up); Qwen2 with lora_dropout 0.3 (PEFT's one mask per target module).
INSTANTIATE_TEST_SUITE_P(
    Families, LoraReference,
    ::testing::Combine(::testing::Values("lora_qwen2_tied_gqa", "lora_qwen3_untied_hd6",
                                         "lora_llama_tied_llama3", "lora_dropout_qwen2_tied_gqa"),
                       ::testing::Bool()));

INSTANTIATE_TEST_SUITE_P(Qwen2, Reference,
                         ::testing::Combine(::testing::Values("tied_gqa", "untied_mha",
                                                              "untied_mqa"),
                                            ::testing::Bool()));
// Qwen3: q/k norms, head_dim above and below hidden / heads; Llama 3: llama3 RoPE scaling with
// frequencies in all three bands (tied), linear scaling (untied).
INSTANTIATE_TEST_SUITE_P(Qwen3, Reference,
                         ::testing::Combine(::testing::Values("qwen3_tied_hd16",
                                                              "qwen3_untied_hd6"),
                                            ::testing::Bool()));
INSTANTIATE_TEST_SUITE_P(Llama, Reference,
                         ::testing::Combine(::testing::Values("llama_tied_llama3",
                                                              "llama_untied_linear"),
                                            ::testing::Bool()));

}  // namespace
}  // namespace kiln
