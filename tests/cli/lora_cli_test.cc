// `--adapter` on kiln eval, generate and export, and `kiln export --merge`, end to end on a tiny
// random Qwen3 whose vocabulary is the vendored Qwen3 tokenizer's, with a random non-zero adapter
// written by write_peft_adapter and the committed PEFT fixture (tests/fixtures/peft_tiny_adapter):
// base + adapter evaluates to the merged export's loss and not to the base's; greedy generation
// with the adapter equals generation from the merged export; an adapter export reads back equal;
// bad input fails with one line, a non-zero exit and nothing written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "common/kiln_split.h"
#include "common/run_kiln.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/io/checkpoint_reader.h"
#include "kiln/io/safetensors.h"
#include "kiln/model/config.h"
#include "kiln/model_files/hf_model_files.h"
#include "kiln/model_files/peft_adapter.h"
#include "kiln/tensor/dtype.h"
#include "kiln/text/tokenizer.h"

namespace kiln {
namespace {

const fs::path kTokenizer = fs::path(KILN_SOURCE_DIR) / "assets/tokenizer/qwen3/tokenizer.json";
const fs::path kFixture = fs::path(KILN_SOURCE_DIR) / "tests/fixtures/peft_tiny_adapter";

using CmdResult = testing::SplitResult;
using testing::expect_one_line_error;

class LoraCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Per process: CTest runs each test of this suite in its own process, in parallel.
    dir_ = fs::temp_directory_path() / ("kiln_lora_cli_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // tiny-qwen3 (the fixture's base) fitted to the tokenizer, its files copied in.
    const CmdResult r = kiln("init --config tiny-qwen3 --seed 3 --tokenizer " +
                             kTokenizer.string() + " --out " + model());
    ASSERT_EQ(r.code, 0) << r.err;
    write_file_atomic(data(),
                      "{\"text\": \"The quick brown fox jumps over the lazy dog.\"}\n"
                      "{\"text\": \"LoRA adds a low-rank update to each projection.\"}\n"
                      "{\"text\": \"Adapters are small; the base model stays frozen.\"}\n");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string model() { return (dir_ / "model").string(); }
  static std::string data() { return (dir_ / "data.jsonl").string(); }
  std::string path(const std::string& p) const { return (dir_ / p).string(); }

  // Runs `kiln <args>`; stdout and stderr apart.
  static CmdResult kiln(const std::string& args) { return testing::run_kiln_split(args, dir_); }

  // `kiln eval --json` of `args`' model: its loss.
  static double eval_loss(const std::string& args) {
    const CmdResult r = kiln("eval --json --data " + data() + " " + args);
    EXPECT_EQ(r.code, 0) << r.err;
    if (r.code != 0) return NAN;
    return parse_json(r.out, "eval output").at("loss").get<double>();
  }

  static fs::path dir_;
};

fs::path LoraCli::dir_;

// A PEFT adapter for the test model on every linear layer, r 4, alpha 16 (s = 4), dropout 0.1
// (a training setting: inference ignores it, an adapter export keeps it), every A and B random
// and non-zero: A ~ U(-0.5, 0.5), B ~ U(-0.1, 0.1), so s B A moves each projection visibly.
PeftAdapter random_adapter(const ModelConfig& c, uint32_t seed) {
  PeftAdapter a;
  a.config.lora.rank = 4;
  a.config.lora.alpha = 16;
  a.config.lora.dropout = 0.1;
  a.config.lora.targets = resolve_lora_targets({"all-linear"}, "test");
  a.config.base_model_name_or_path = "kiln/tiny-qwen3-test";
  a.tensors = LoraTensors(c, a.config.lora);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ua(-0.5f, 0.5f), ub(-0.1f, 0.1f);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (LoraTarget t : a.config.lora.targets) {
      for (float& v : a.tensors.at(l, t).a) v = ua(rng);
      for (float& v : a.tensors.at(l, t).b) v = ub(rng);
    }
  }
  return a;
}

// Writes random_adapter(seed) for the test model to `out`.
PeftAdapter write_random_adapter(const std::string& model, const fs::path& out, uint32_t seed) {
  const ModelConfig c = read_config(fs::path(model) / "config.json");
  PeftAdapter a = random_adapter(c, seed);
  write_peft_adapter(out, a.config.lora, a.config.base_model_name_or_path, a.tensors, DType::F32,
                     HfModelFiles::read(model));
  return a;
}

// Every tensor of the model directory `b` is the `dtype` rounding of `a`'s (in fp32).
void expect_rounded_tensors(const fs::path& a, const fs::path& b, DType dtype) {
  CheckpointReader ra(a), rb(b);
  ASSERT_EQ(ra.names(), rb.names());
  for (const auto& name : ra.names()) {
    const auto& shape = ra.info(name).shape;
    EXPECT_EQ(rb.info(name).dtype, dtype) << name;
    std::vector<float> x(ra.info(name).numel()), y(x.size());
    ra.read_f32(name, shape, x.data());
    rb.read_f32(name, shape, y.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = dtype == DType::BF16 ? bf16_to_f32(f32_to_bf16(x[i])) : x[i];
      ASSERT_EQ(y[i], want) << name << "[" << i << "]";
    }
  }
}

// Base + adapter (unmerged, --adapter) has the merged export's loss: the merge is W + s B A in
// fp32, so the two differ only by fp32 rounding (each weight rounded once more, products summed
// in another order), far below 1e-5 of the loss; the adapter moves the loss by more than 100
// times that, so the check cannot pass with the adapter ignored. A bf16 merged export is the
// fp32 one rounded once, value for value.
TEST_F(LoraCli, EvalWithAdapterEqualsMergedExport) {
  write_random_adapter(model(), path("adapter"), 11);
  const double base = eval_loss("--model " + model());
  const double adapted = eval_loss("--model " + model() + " --adapter " + path("adapter"));
  const CmdResult e = kiln("export --model " + model() + " --adapter " + path("adapter") +
                           " --merge --out " + path("merged"));
  ASSERT_EQ(e.code, 0) << e.err;
  const double merged = eval_loss("--model " + path("merged"));
  EXPECT_NEAR(adapted, merged, 1e-5 * merged);
  EXPECT_GT(std::fabs(adapted - base), 1e-3 * base) << "the adapter does not move the loss";
  // A complete model directory: config, tokenizer and template, generation config.
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json",
                        "generation_config.json", "model.safetensors"}) {
    EXPECT_TRUE(fs::exists(path("merged") + "/" + f)) << f;
  }
  EXPECT_EQ(read_file(path("merged") + "/tokenizer.json"), read_file(model() + "/tokenizer.json"));
  ASSERT_EQ(kiln("export --model " + model() + " --adapter " + path("adapter") +
                 " --merge --dtype bf16 --out " + path("merged_bf16"))
                .code,
            0);
  expect_rounded_tensors(path("merged"), path("merged_bf16"), DType::BF16);
  EXPECT_EQ(read_json_file(path("merged_bf16") + "/config.json").at("torch_dtype"), "bfloat16");
}

// The committed PEFT fixture (r 4, q_proj and v_proj, lora_dropout 0.05) applies to the same base
// as PEFT would: evaluation ignores its dropout, matches its merged export and moves the loss.
TEST_F(LoraCli, PeftFixtureEvaluatesAsItsMergedExport) {
  const double adapted = eval_loss("--model " + model() + " --adapter " + kFixture.string());
  ASSERT_EQ(kiln("export --model " + model() + " --adapter " + kFixture.string() +
                 " --merge --out " + path("fixture_merged"))
                .code,
            0);
  const double merged = eval_loss("--model " + path("fixture_merged"));
  EXPECT_NEAR(adapted, merged, 1e-5 * merged);
  const double base = eval_loss("--model " + model());
  // Its small values move the loss by about 1e-3 of it: 100 times the merge's tolerance.
  EXPECT_GT(std::fabs(adapted - base), 1e-4 * base) << "the fixture does not move the loss";
}

// Greedy decoding with the adapter (base + s B A x per product, unmerged) picks the tokens the
// merged export picks, which are not the base's.
TEST_F(LoraCli, GenerateWithAdapterMatchesMergedExport) {
  write_random_adapter(model(), path("adapter"), 12);
  ASSERT_EQ(kiln("export --model " + model() + " --adapter " + path("adapter") + " --merge --out " +
                 path("merged"))
                .code,
            0);
  const std::string args = " --prompt 'Once upon a time' --max-new-tokens 12 --temperature 0";
  const CmdResult adapted =
      kiln("generate --model " + model() + " --adapter " + path("adapter") + args);
  const CmdResult merged = kiln("generate --model " + path("merged") + args);
  ASSERT_EQ(adapted.code, 0) << adapted.err;
  ASSERT_EQ(merged.code, 0) << merged.err;
  EXPECT_FALSE(adapted.out.empty());
  EXPECT_EQ(adapted.out, merged.out);
  EXPECT_EQ(adapted.err, merged.err);  // the same stop reason after the same count
  // The adapter matters: the base alone says something else.
  const CmdResult base = kiln("generate --model " + model() + args);
  ASSERT_EQ(base.code, 0) << base.err;
  EXPECT_NE(base.out, adapted.out);
}

// Without --merge the adapter is written back as a PEFT directory: read back equal in fp32 (its
// config too, dropout and base name kept), every value the bf16 rounding under --dtype bf16, with
// the base's tokenizer files beside it.
TEST_F(LoraCli, ExportAdapterReadsBackEqual) {
  const ModelConfig c = read_config(fs::path(model()) / "config.json");
  const PeftAdapter a = write_random_adapter(model(), path("adapter"), 13);
  ASSERT_EQ(
      kiln("export --model " + model() + " --adapter " + path("adapter") + " --out " + path("a32"))
          .code,
      0);
  const PeftAdapter b = read_peft_adapter(path("a32"), c);
  EXPECT_EQ(b.config.lora, a.config.lora);
  EXPECT_EQ(b.config.base_model_name_or_path, a.config.base_model_name_or_path);
  EXPECT_TRUE(b.tensors == a.tensors);
  EXPECT_EQ(read_file(path("a32") + "/tokenizer.json"), read_file(model() + "/tokenizer.json"));
  EXPECT_TRUE(fs::exists(path("a32") + "/tokenizer_config.json"));
  EXPECT_FALSE(fs::exists(path("a32") + "/model.safetensors"));  // the adapter only

  ASSERT_EQ(kiln("export --model " + model() + " --adapter " + path("adapter") +
                 " --dtype bf16 --out " + path("a16"))
                .code,
            0);
  const PeftAdapter h = read_peft_adapter(path("a16"), c);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (LoraTarget t : a.config.lora.targets) {
      const LoraFactors &x = a.tensors.at(l, t), &y = h.tensors.at(l, t);
      for (size_t i = 0; i < x.a.size(); ++i) ASSERT_EQ(y.a[i], bf16_to_f32(f32_to_bf16(x.a[i])));
      for (size_t i = 0; i < x.b.size(); ++i) ASSERT_EQ(y.b[i], bf16_to_f32(f32_to_bf16(x.b[i])));
    }
  }
  const TensorInfo* q_a = SafetensorsFile(fs::path(path("a16")) / kPeftWeightsFile)
                              .find(peft_tensor_name(0, LoraTarget::kQ, LoraFactor::kA));
  ASSERT_NE(q_a, nullptr);
  EXPECT_EQ(q_a->dtype, DType::BF16);

  // The committed fixture round-trips too (its float32 values exactly).
  ASSERT_EQ(kiln("export --model " + model() + " --adapter " + kFixture.string() + " --out " +
                 path("fixture_out"))
                .code,
            0);
  const PeftAdapter f = read_peft_adapter(kFixture, c),
                    g = read_peft_adapter(path("fixture_out"), c);
  EXPECT_EQ(g.config.lora, f.config.lora);
  EXPECT_TRUE(g.tensors == f.tensors);
}

// --model without --adapter re-exports the model, as --checkpoint MODEL does.
TEST_F(LoraCli, ExportModelAloneIsAPlainExport) {
  ASSERT_EQ(kiln("export --model " + model() + " --dtype bf16 --out " + path("plain")).code, 0);
  expect_rounded_tensors(model(), path("plain"), DType::BF16);
  EXPECT_EQ(read_file(path("plain") + "/tokenizer.json"), read_file(model() + "/tokenizer.json"));
}

// Bad input: one line naming the problem, a non-zero exit, nothing written.
TEST_F(LoraCli, BadAdaptersFailWithOneLine) {
  // A directory without adapter_config.json.
  fs::create_directories(path("not_adapter"));
  // An adapter for another base: hidden size 128, so q_proj's A is (4, 128), not (4, 64).
  ModelConfig other = read_config(fs::path(model()) / "config.json");
  other.hidden_size = 128;
  const PeftAdapter a = random_adapter(other, 14);
  write_peft_adapter(path("wrong_shapes"), a.config.lora, "", a.tensors, DType::F32,
                     HfModelFiles::read(model()));
  struct Case {
    std::string adapter, needle;
  };
  for (const Case& c : {Case{path("not_adapter"), "no adapter_config.json"},
                        Case{path("wrong_shapes"), "has shape [128, 4], expected [64, 4]"}}) {
    SCOPED_TRACE(c.adapter);
    const std::string with = " --model " + model() + " --adapter " + c.adapter;
    expect_one_line_error(kiln("eval --data " + data() + with), c.needle);
    expect_one_line_error(kiln("generate --prompt hi --max-new-tokens 2" + with), c.needle);
    for (const char* merge : {"", " --merge"}) {
      expect_one_line_error(kiln("export --out " + path("out") + merge + with), c.needle);
      EXPECT_FALSE(fs::exists(path("out")));
    }
  }
  // --merge with nothing to merge: a model without --adapter, a checkpoint of no LoRA run.
  expect_one_line_error(kiln("export --model " + model() + " --merge --out " + path("out")),
                        "--merge needs --adapter");
  EXPECT_FALSE(fs::exists(path("out")));
  expect_one_line_error(kiln("export --checkpoint " + model() + " --merge --out " + path("out")),
                        "is not a LoRA run's checkpoint");
  EXPECT_FALSE(fs::exists(path("out")));
  // Neither --checkpoint nor --model.
  expect_one_line_error(kiln("export --out " + path("out")), "--checkpoint or --model");
  EXPECT_FALSE(fs::exists(path("out")));
}

}  // namespace
}  // namespace kiln
