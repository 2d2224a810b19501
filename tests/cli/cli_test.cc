// End-to-end tests of the kiln binary: round trips, training, eval, and one-line errors with a
// non-zero exit for every kind of bad input.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/run_kiln.h"
#include "common/temp_dir.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/io/checkpoint_reader.h"
#include "kiln/model/config.h"
#include "kiln/model/layout.h"
#include "kiln/tensor/dtype.h"

namespace kiln {
namespace {

using testing::CmdResult;

CmdResult kiln(const std::string& args) { return testing::run_kiln(args); }

class Cli : public ::testing::Test {
 protected:
  std::string path(const std::string& p) const { return (dir_ / p).string(); }
  // Asserts a failed run printed exactly one line: "kiln: error: ...", containing `needle`.
  static void expect_one_line_error(const CmdResult& r, const std::string& needle) {
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_EQ(r.out.rfind("kiln: error: ", 0), 0u) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.out;
  }
  // The pid in its name keeps concurrent runs of this suite (other checkouts) apart.
  testing::TempDir tmp_{"kiln_cli"};
  const fs::path dir_ = tmp_.path();
};

void expect_same_tensors(const fs::path& a, const fs::path& b, DType b_dtype) {
  CheckpointReader ra(a), rb(b);
  ASSERT_EQ(ra.names(), rb.names());
  for (const auto& name : ra.names()) {
    const auto& shape = ra.info(name).shape;
    std::vector<float> x(ra.info(name).numel()), y(x.size());
    ra.read_f32(name, shape, x.data());
    rb.read_f32(name, shape, y.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = b_dtype == DType::BF16 ? bf16_to_f32(f32_to_bf16(x[i])) : x[i];
      ASSERT_EQ(y[i], want) << name << "[" << i << "]";
    }
  }
}

TEST_F(Cli, HelpForEverySubcommand) {
  EXPECT_EQ(kiln("--help").code, 0);
  for (const char* sub : {"init", "train", "eval", "export", "bench", "bench train"}) {
    CmdResult r = kiln(std::string(sub) + " --help");
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub;
  }
}

TEST_F(Cli, InitExportReloadRoundTrip) {
  ASSERT_EQ(kiln("init --config tiny --seed 3 --out " + path("init")).code, 0);
  ASSERT_EQ(kiln("export --checkpoint " + path("init") + " --out " + path("f32")).code, 0);
  expect_same_tensors(path("init"), path("f32"), DType::F32);
  // bf16 export: every value is the bf16 rounding of the original; config says bfloat16
  ASSERT_EQ(
      kiln("export --checkpoint " + path("init") + " --out " + path("bf16") + " --dtype bf16").code,
      0);
  expect_same_tensors(path("init"), path("bf16"), DType::BF16);
  EXPECT_EQ(read_json_file(path("bf16") + "/config.json").at("torch_dtype"), "bfloat16");
  EXPECT_EQ(CheckpointReader(path("bf16")).info("model.norm.weight").dtype, DType::BF16);
  // sharded export reads back identically, through its index
  ASSERT_EQ(kiln("export --checkpoint " + path("init") + " --out " + path("sharded") +
                 " --max-shard-size 100KB")
                .code,
            0);
  EXPECT_TRUE(fs::exists(path("sharded/model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(path("sharded/model.safetensors")));
  expect_same_tensors(path("init"), path("sharded"), DType::F32);
  // and a bf16 sharded checkpoint loads back into f32 exactly
  ASSERT_EQ(kiln("export --checkpoint " + path("bf16") + " --out " + path("bf16_f32")).code, 0);
  expect_same_tensors(path("bf16"), path("bf16_f32"), DType::F32);
}

TEST_F(Cli, InitFromConfigFileUntied) {
  ModelConfig c = preset_config("tiny");
  c.tie_word_embeddings = false;
  c.num_key_value_heads = 4;
  write_file_atomic(path("config.json"), config_to_json(c).dump());
  ASSERT_EQ(kiln("init --config " + path("config.json") + " --out " + path("m")).code, 0);
  CheckpointReader r(path("m"));
  EXPECT_TRUE(r.contains("lm_head.weight"));
  EXPECT_EQ(r.info("model.layers.1.self_attn.k_proj.weight").shape, (std::vector<int64_t>{64, 64}));
}

std::string write_recipe(const fs::path& dir, const std::string& model, int steps,
                         const std::string& extra = "") {
  const std::string text = "model:\n  path: " + model + "\ndata:\n  train: " + KILN_SOURCE_DIR +
                           "/assets/demo/tokens.jsonl\n  seq_len: 64\noptimizer:\n  lr: 1.0e-2\n"
                           "schedule:\n  name: cosine\n  warmup_steps: 10\n"
                           "train:\n  max_steps: " +
                           std::to_string(steps) + "\n  micro_batch_size: 4\n" + extra +
                           "output:\n  dir: " + (dir / "run").string() + "\n";
  write_file_atomic(dir / "recipe.yaml", text);
  return (dir / "recipe.yaml").string();
}

TEST_F(Cli, TrainWritesMetricsAndModelAndLossFalls) {
  ASSERT_EQ(kiln("init --config tiny --seed 0 --out " + path("init")).code, 0);
  const std::string recipe = write_recipe(dir_, path("init"), 100);
  CmdResult r = kiln("train " + recipe +
                     " train.log_every=10 train.micro_batch_size=8 train.grad_accum_steps=2 "
                     "schedule.warmup_steps=20");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step 100/100 | loss "), std::string::npos) << r.out;
  std::ifstream f(path("run/metrics.jsonl"));
  std::string line;
  std::vector<Json> rows;
  while (std::getline(f, line)) rows.push_back(parse_json(line, "metrics.jsonl"));
  ASSERT_EQ(rows.size(), 100u);
  for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens_per_s"}) {
    EXPECT_TRUE(rows[0].contains(k)) << k;
  }
  EXPECT_EQ(rows.back().at("step"), 100);
  EXPECT_LT(rows.back().at("loss").get<double>(), rows.front().at("loss").get<double>() - 1.0);
  // The final model loads; eval gives the mean loss over every predicted token of the file.
  CmdResult e = kiln("eval --json --model " + path("run/final") + " --data " + KILN_SOURCE_DIR +
                     "/assets/demo/tokens.jsonl");
  ASSERT_EQ(e.code, 0) << e.out;
  Json j = parse_json(e.out, "eval output");
  EXPECT_LT(j.at("loss").get<double>(), 6.0);
  int64_t expected_targets = 0;  // every label that is not -100, except each example's first
  std::ifstream d(std::string(KILN_SOURCE_DIR) + "/assets/demo/tokens.jsonl");
  while (std::getline(d, line)) {
    Json ex = parse_json(line, "tokens.jsonl");
    const auto& labels = ex.at("labels");
    for (size_t i = 1; i < labels.size(); ++i) expected_targets += labels[i] != -100;
  }
  EXPECT_EQ(j.at("tokens").get<int64_t>(), expected_targets);
  // The run directory exports like a checkpoint.
  EXPECT_EQ(kiln("export --checkpoint " + path("run") + " --out " + path("exported")).code, 0);
  expect_same_tensors(path("run/final"), path("exported"), DType::F32);
}

// train.epochs: the steps of that many passes, instead of train.max_steps.
TEST_F(Cli, EpochsSetTheStepCount) {
  ASSERT_EQ(kiln("init --config tiny --seed 1 --out " + path("init")).code, 0);
  const std::string recipe = write_recipe(dir_, path("init"), 1000);
  std::ifstream data(std::string(KILN_SOURCE_DIR) + "/assets/demo/tokens.jsonl");
  int64_t examples = 0;
  for (std::string line; std::getline(data, line);) examples += !line.empty();
  // micro_batch_size 4 (write_recipe), accumulation 3: ceil(2 * floor(N / 4) / 3) steps.
  CmdResult r = kiln("train " + recipe + " train.epochs=2 train.grad_accum_steps=3");
  ASSERT_EQ(r.code, 0) << r.out;
  const int64_t want = (2 * (examples / 4) + 2) / 3;
  EXPECT_NE(r.out.find(fmt::format("{} steps", want)), std::string::npos) << r.out;
  std::ifstream f(path("run/metrics.jsonl"));
  std::vector<Json> rows;
  for (std::string line; std::getline(f, line);) rows.push_back(parse_json(line, "metrics"));
  ASSERT_EQ(static_cast<int64_t>(rows.size()), want);
  EXPECT_EQ(rows.back().at("epoch"), 2);  // both epochs used up
  EXPECT_EQ(rows[rows.size() - 2].at("epoch"), 1);
  // Packed: every step but the last within epoch 0; the last one finishes it.
  r = kiln("train " + recipe + " train.epochs=1 data.pack=true output.dir=" + path("packed"));
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream p(path("packed/metrics.jsonl"));
  rows.clear();
  for (std::string line; std::getline(p, line);) rows.push_back(parse_json(line, "metrics"));
  ASSERT_GT(rows.size(), 2u);
  // At most a row per example, plus the row that crosses into the next epoch.
  EXPECT_LE(static_cast<int64_t>(rows.size()), examples / 4 + 1);
  for (size_t i = 0; i + 1 < rows.size(); ++i) EXPECT_EQ(rows[i].at("epoch"), 0) << i;
  EXPECT_EQ(rows.back().at("epoch"), 1);
  expect_one_line_error(kiln("train " + recipe + " train.epochs=-1"),
                        "train.epochs: must be >= 0, got -1");
}

TEST_F(Cli, GradientAccumulationEqualsOneLargeBatch) {
  ASSERT_EQ(kiln("init --config tiny --seed 1 --out " + path("init")).code, 0);
  const std::string recipe = write_recipe(dir_, path("init"), 2);
  ASSERT_EQ(kiln("train " + recipe + " train.micro_batch_size=8 output.dir=" + path("a")).code, 0);
  ASSERT_EQ(kiln("train " + recipe +
                 " train.micro_batch_size=4 train.grad_accum_steps=2 output.dir=" + path("b"))
                .code,
            0);
  CheckpointReader ra(path("a/final")), rb(path("b/final"));
  for (const auto& name : ra.names()) {
    std::vector<float> x(ra.info(name).numel()), y(x.size());
    ra.read_f32(name, ra.info(name).shape, x.data());
    rb.read_f32(name, ra.info(name).shape, y.data());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 2e-5) << name;
  }
}

TEST_F(Cli, MissingFile) {
  expect_one_line_error(kiln("eval --model " + path("nope") + " --data x.jsonl"), path("nope"));
  ASSERT_EQ(kiln("init --config tiny --out " + path("m")).code, 0);
  expect_one_line_error(kiln("eval --model " + path("m") + " --data " + path("missing.jsonl")),
                        "missing.jsonl");
  expect_one_line_error(kiln("train " + path("missing.yaml")), "missing.yaml");
}

TEST_F(Cli, MalformedJson) {
  ASSERT_EQ(kiln("init --config tiny --out " + path("m")).code, 0);
  write_file_atomic(path("m/config.json"), "{\"model_type\": \"qwen2\", ");
  expect_one_line_error(kiln("export --checkpoint " + path("m") + " --out " + path("o")),
                        "config.json");
  write_file_atomic(path("bad.jsonl"), "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [1,\n");
  ASSERT_EQ(kiln("init --config tiny --out " + path("m2")).code, 0);
  expect_one_line_error(kiln("eval --model " + path("m2") + " --data " + path("bad.jsonl")),
                        "bad.jsonl:2");
}

// 70k levels in 140 KB: a depth limit, not a stack overflow, with the file and the position.
TEST_F(Cli, DeeplyNestedJsonIsAnErrorNamingTheFile) {
  const std::string deep = std::string(70000, '[') + std::string(70000, ']');
  write_file_atomic(path("deep.json"), "{\"hidden_size\":\n" + deep + "}\n");
  expect_one_line_error(kiln("init --config " + path("deep.json") + " --out " + path("m")),
                        path("deep.json") +
                            ": malformed JSON: nested deeper than 256 levels at "
                            "line 2, column 256");
  write_file_atomic(path("deep.jsonl"), "{\"input_ids\": [1, 2]}\n{\"input_ids\":" + deep + "}\n");
  ASSERT_EQ(kiln("init --config tiny --out " + path("m2")).code, 0);
  expect_one_line_error(kiln("eval --model " + path("m2") + " --data " + path("deep.jsonl")),
                        path("deep.jsonl") + ":2: malformed JSON: nested deeper than 256 levels");
}

TEST_F(Cli, WrongShapes) {
  ASSERT_EQ(kiln("init --config tiny --out " + path("m")).code, 0);
  Json c = read_json_file(path("m/config.json"));
  c["intermediate_size"] = 180;  // weights were written for 176
  write_file_atomic(path("m/config.json"), c.dump());
  expect_one_line_error(kiln("export --checkpoint " + path("m") + " --out " + path("o")),
                        "mlp.gate_proj.weight has shape [176, 64], expected [180, 64]");
}

TEST_F(Cli, TruncatedSafetensors) {
  ASSERT_EQ(kiln("init --config tiny --out " + path("m")).code, 0);
  fs::resize_file(path("m/model.safetensors"), fs::file_size(path("m/model.safetensors")) - 100);
  expect_one_line_error(kiln("export --checkpoint " + path("m") + " --out " + path("o")),
                        "model.safetensors");
}

TEST_F(Cli, UnsupportedModelType) {
  ASSERT_EQ(kiln("init --config tiny --out " + path("m")).code, 0);
  Json c = read_json_file(path("m/config.json"));
  c["model_type"] = "gpt2";
  c["architectures"] = {"GPT2LMHeadModel"};
  write_file_atomic(path("m/config.json"), c.dump());
  expect_one_line_error(kiln("eval --model " + path("m") + " --data x.jsonl"), "gpt2");
}

// A field kiln would need but does not do: one line naming the field and its value.
TEST_F(Cli, UnsupportedConfigField) {
  ASSERT_EQ(kiln("init --config tiny-llama --out " + path("m")).code, 0);
  Json c = read_json_file(path("m/config.json"));
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  write_file_atomic(path("m/config.json"), c.dump());
  expect_one_line_error(kiln("eval --model " + path("m") + " --data x.jsonl"),
                        "rope_scaling.rope_type \"yarn\" is not supported");
  c = read_json_file(path("m/config.json"));
  c["rope_scaling"] = nullptr;
  c["num_experts"] = 8;
  write_file_atomic(path("m/config.json"), c.dump());
  expect_one_line_error(kiln("export --checkpoint " + path("m") + " --out " + path("o")),
                        "'num_experts' = 8");
}

// A Qwen3 config over weights without q_norm (a Qwen2.5 checkpoint's, relabelled): one line
// naming the tensor.
TEST_F(Cli, CheckpointMissingQNorm) {
  ASSERT_EQ(kiln("init --config tiny --out " + path("m")).code, 0);
  Json c = read_json_file(path("m/config.json"));
  c["model_type"] = "qwen3";
  c["architectures"] = {"Qwen3ForCausalLM"};
  c["attention_bias"] = true;  // so the first tensor missing is layer 0's q_norm
  write_file_atomic(path("m/config.json"), c.dump());
  expect_one_line_error(kiln("export --checkpoint " + path("m") + " --out " + path("o")),
                        "no tensor named model.layers.0.self_attn.q_norm.weight");
}

TEST_F(Cli, BadRecipe) {
  ASSERT_EQ(kiln("init --config tiny --out " + path("m")).code, 0);
  const std::string recipe = write_recipe(dir_, path("m"), 1, "  max_step: 3\n");
  expect_one_line_error(kiln("train " + recipe), "train.max_step");
  const std::string ok = write_recipe(dir_, path("m"), 1);
  expect_one_line_error(kiln("train " + ok + " optimizer.lr=abc"), "optimizer.lr");
}

// Upper bounds: 1e300 s once became a negative timeout, and the worker count had no limit.
TEST_F(Cli, WorkerCountAndTimeoutAreBounded) {
  ASSERT_EQ(kiln("init --config tiny --out " + path("m")).code, 0);
  const std::string ok = write_recipe(dir_, path("m"), 1);
  expect_one_line_error(kiln("train " + ok + " dist.timeout_s=1e300"),
                        "dist.timeout_s: must be in (0, 604800] (a week), got 1e300");
  expect_one_line_error(kiln("train " + ok + " dist.nproc_per_node=5000"),
                        "dist.nproc_per_node: must be in [1, 1024], got 5000");
  expect_one_line_error(kiln("train " + ok + " --nproc-per-node 5000"),
                        "dist.nproc_per_node is 5000; it must be in [1, 1024]");
}

TEST_F(Cli, UnknownPresetAndDtype) {
  expect_one_line_error(kiln("init --config gpt5 --out " + path("m")), "gpt5");
  expect_one_line_error(kiln("init --config tiny --dtype f8 --out " + path("m")), "f8");
}

}  // namespace
}  // namespace kiln
