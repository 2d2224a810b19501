// kiln's preference losses against an independent reference: tools/dpo_reference.py (float64
// PyTorch written from TRL's DPOTrainer and CPOTrainer; see its docstring for the command and the
// cases) produced the loss, TRL's six metrics and every trainable tensor's gradient of one step on
// three pre-tokenized pairs, for each loss type: Qwen2 (tied, grouped-query) and Qwen3 (untied,
// head_dim 6) fully fine-tuned against a reference model of their shape, and Llama 3 with LoRA
// against its base (the adapters off); and with policy = reference (sigmoid: ln 2). The pairs go
// through kiln's data path (data.format preference, pre-tokenized: one example per pair, split
// into two rows), the reference through Decoder::sequence_logps and the policy through the
// preference head (model/preference_head.h).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/grad_check.h"
#include "common/reference_fixture.h"
#include "common/test_backend.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/data/formats.h"
#include "kiln/data/sampler.h"
#include "kiln/data/source_lines.h"
#include "kiln/io/checkpoint_reader.h"
#include "kiln/model/decoder.h"
#include "kiln/train/preference_config.h"

namespace kiln {
namespace {

fs::path fixture(const std::string& name) {
  return fs::path(KILN_SOURCE_DIR) / "tests/fixtures/dpo" / name;
}

// The fixture's pairs through kiln's preference format: 2P rows, pair p in rows 2p and 2p + 1.
Batch read_pairs(const fs::path& file, int64_t vocab) {
  const LineEncoder encoder(DataFormat::kPreference, nullptr, vocab, false);
  const std::string text = read_file(file);
  std::vector<Example> pairs;
  int T = 2;
  for (const SourceLine& line : source_lines(text, file.string())) {
    pairs.push_back(encoder.encode(line.text, file.string()));
    const auto [c, r] = pair_sequences(pairs.back().view());
    T = std::max({T, static_cast<int>(c.size()), static_cast<int>(r.size())});
  }
  Batch b;
  b.resize(2 * static_cast<int>(pairs.size()), T);
  for (size_t p = 0; p < pairs.size(); ++p) {
    fill_example_rows(b, 2 * static_cast<int>(p), pairs[p].view(), 2);
  }
  return b;
}

PreferenceTerms terms_of(const Json& expected, PreferenceLossType type, double scale) {
  DpoConfig c;
  c.loss_type = type;
  c.beta = expected.at("beta").get<double>();
  c.label_smoothing = expected.at("label_smoothing").get<double>();
  c.simpo_gamma = expected.at("simpo_gamma").get<double>();
  return c.terms(scale);
}

// A case's policy and reference: the policy's store (base, and adapters for LoRA), the
// reference's (another model, or the policy's own store with the adapters off).
struct Case {
  ModelConfig config;
  std::optional<LoraConfig> lora;
  Decoder model;
  ParamStore policy;
  std::optional<ParamStore> reference;  // full fine-tuning with a reference directory
  explicit Case(const fs::path& dir, bool self_reference = false)
      : config(read_config(dir / "config.json")),
        lora(fs::exists(dir / "adapter_config.json")
                 ? std::optional(testing::read_adapter_config(dir / "adapter_config.json"))
                 : std::nullopt),
        model(config, testing::cpu_fp32(), lora),
        policy(model.layout(), testing::cpu_fp32()) {
    testing::load_reference_model(dir, config, model.layout(), policy);
    if (lora) return;
    reference.emplace(model.layout(), testing::cpu_fp32(), false);
    testing::load_reference_model(self_reference ? dir : dir / "reference", config, model.layout(),
                                  *reference);
  }
};

struct StepResult {
  double loss = 0;
  std::map<std::string, double> metrics;
};

// One step: the reference's sequence log-probabilities, then the preference loss's forward and
// backward (gradients into c.policy, zeroed first).
StepResult preference_step(Case& c, const Batch& batch, const PreferenceTerms& terms,
                           bool recompute) {
  const Backend& be = testing::cpu_fp32();
  c.policy.zero_grads();
  DeviceBuffer<double> ref(be, 2 * static_cast<size_t>(batch.B)), sums(be, kNumPreferenceSums);
  const bool reads_reference = terms.type != PreferenceLossType::kSimpo;
  if (reads_reference) {
    if (c.reference) {
      c.model.sequence_logps(batch, *c.reference, ref.data(), /*base_only=*/false);
    } else {
      c.model.sequence_logps(batch, c.policy, ref.data(), /*base_only=*/true);
    }
  }
  c.model.forward_backward(
      batch, c.policy, PreferenceHead{terms, reads_reference ? ref.data() : nullptr, sums.data()},
      recompute);
  std::vector<double> host(kNumPreferenceSums);
  be.copy_to_host(host.data(), sums.data(), host.size() * sizeof(double));
  be.synchronize();
  const double pairs = host[kPrefPairs];
  EXPECT_EQ(pairs, batch.B / 2);
  StepResult r;
  r.loss = host[kPrefLoss] / pairs;
  for (const PreferenceMetric& m : kPreferenceMetrics) r.metrics[m.name] = host[m.sum] / pairs;
  return r;
}

// Every trainable tensor's gradient against the reference's, within 1e-3 of its norm.
void expect_gradients(Case& c, const fs::path& grads_file) {
  CheckpointReader grads(grads_file);
  const ParamLayout& layout = c.model.layout();
  int checked = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    if (!layout.units()[u].trainable) continue;
    for (const auto& e : layout.units()[u].entries) {
      std::vector<float> want(e.numel);
      grads.read_f32(e.name, e.shape, want.data());
      EXPECT_LT(testing::rel_err(c.policy.grads(u).data() + e.offset, want.data(), e.numel), 1e-3)
          << grads_file.filename().string() << " " << e.name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(grads.names().size()));
}

void expect_step(const StepResult& got, const Json& want, const std::string& what) {
  const double loss = want.at("loss").get<double>();
  EXPECT_NEAR(got.loss, loss, 1e-5 * std::max(1.0, std::fabs(loss))) << what;
  for (const PreferenceMetric& m : kPreferenceMetrics) {
    EXPECT_NEAR(got.metrics.at(m.name), want.at(m.name).get<double>(), 1e-5)
        << what << " " << m.name;
  }
}

class PreferenceReference
    : public ::testing::TestWithParam<std::tuple<std::string, PreferenceLossType, bool>> {};

TEST_P(PreferenceReference, LossMetricsAndGradientsMatch) {
  const auto& [name, type, recompute] = GetParam();
  const fs::path dir = fixture(name);
  Case c(dir);
  const Batch batch = read_pairs(dir / "pairs.jsonl", c.config.vocab_size);
  const Json expected = read_json_file(dir / "expected.json");
  const std::string type_name(name_of(kPreferenceLossNames, type));
  const StepResult r =
      preference_step(c, batch, terms_of(expected, type, 2.0 / batch.B), recompute);
  expect_step(r, expected.at("losses").at(type_name), name + " " + type_name);
  expect_gradients(c, dir / fmt::format("grads_{}.safetensors", type_name));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PreferenceReference,
    ::testing::Combine(::testing::Values("dpo_qwen2_tied_gqa", "dpo_qwen3_untied_hd6",
                                         "dpo_lora_llama_tied_llama3"),
                       ::testing::Values(PreferenceLossType::kSigmoid, PreferenceLossType::kIpo,
                                         PreferenceLossType::kHinge, PreferenceLossType::kSimpo),
                       ::testing::Bool()));

// Policy = reference (a recipe's dpo.reference: base at step 1): the sigmoid loss is ln 2 within
// 1e-6, every reward 0, and the gradient the reference's.
TEST(PreferenceReferenceSelf, FirstLossIsLn2) {
  for (const char* name : {"dpo_qwen2_tied_gqa", "dpo_qwen3_untied_hd6"}) {
    const fs::path dir = fixture(name);
    Case c(dir, /*self_reference=*/true);
    const Batch batch = read_pairs(dir / "pairs.jsonl", c.config.vocab_size);
    const Json expected = read_json_file(dir / "expected.json");
    const StepResult r = preference_step(
        c, batch, terms_of(expected, PreferenceLossType::kSigmoid, 2.0 / batch.B), false);
    EXPECT_NEAR(r.loss, std::log(2.0), 1e-6) << name;
    EXPECT_NEAR(r.metrics.at("rewards/margins"), 0.0, 1e-9) << name;
    expect_step(r, expected.at("self_sigmoid"), name);
    expect_gradients(c, dir / "grads_self_sigmoid.safetensors");
  }
}

}  // namespace
}  // namespace kiln
