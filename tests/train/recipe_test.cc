#include "kiln/train/recipe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "common/error_of.h"
#include "common/temp_dir.h"
#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/data/formats.h"
#include "kiln/train/recipe_suggest.h"

namespace kiln {
namespace {

const char* kMinimal = R"(model:
  path: /models/qwen
data:
  train: /data/train.jsonl
output:
  dir: runs/a
)";

// A recipe with every key set to a non-default value.
const char* kFull = R"(model:
  path: /models/qwen2-0.5b
data:
  train: data/train.jsonl
  format: chat
  tokenizer: tok/tokenizer.json
  template: qwen3
  enable_thinking: false
  seq_len: 1024
  overlong: drop
  pack: true
  shuffle: false
  train_on_prompt: true
  skip_bad_lines: true
  cache_dir: /cache
optimizer:
  name: sgd
  lr: 3.0e-4
  weight_decay: 0.1
  betas: [0.8, 0.95]
  eps: 1e-6
  momentum: 0.9
schedule:
  name: cosine
  warmup_steps: 20
  min_lr_ratio: 0.1
train:
  max_steps: 500
  micro_batch_size: 4
  grad_accum_steps: 8
  grad_clip: 0
  seed: 18446744073709551615
  activation_checkpointing: true
  log_every: 10
output:
  dir: runs/full
  dtype: bf16
)";

// data.train entries of these paths, each in data.format with weight 1.
std::vector<Recipe::TrainFile> files(const std::vector<std::string>& paths) {
  std::vector<Recipe::TrainFile> out;
  for (const std::string& p : paths) out.push_back({p, std::nullopt, 1.0});
  return out;
}

Recipe parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_recipe(text, "recipe.yaml", "/base", overrides);
}

// The message of the kiln::Error that parse throws.
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse(text, overrides);
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// A key the recipe leaves out takes the Recipe struct's default (the one place defaults are
// written); DocumentedDefaults holds each to docs/recipe.md.
TEST(Recipe, Defaults) {
  Recipe expected;
  expected.model.path = "/models/qwen";
  expected.data.train = files({"/data/train.jsonl"});
  expected.output.dir = "/base/runs/a";
  EXPECT_EQ(parse(kMinimal), expected);
}

// Every key's default as docs/recipe.md states it (the first `literal` of its row's default
// column) is the default: setting a key to it leaves the recipe as it was. The keys come from the
// schema, so a new key needs a documented default (or a place in kNotLiteral).
TEST(Recipe, DocumentedDefaults) {
  const std::string doc = read_file(fs::path(KILN_SOURCE_DIR) / "docs/recipe.md");
  const std::set<std::string> kRequired = {"model.path", "data.train", "output.dir"};
  const std::set<std::string> kNotLiteral = {"lora.targets", "data.enable_thinking"};
  const Recipe plain = parse(kMinimal), with_lora = parse(std::string(kMinimal) + "lora:\n");
  const std::string kDpoFormat = "data.format=preference";  // a dpo section trains on pairs
  const Recipe with_dpo = parse(std::string(kMinimal) + "dpo:\n", {kDpoFormat});
  for (const std::string& key : recipe_keys()) {
    const size_t row = doc.find("| `" + key + "` |");
    ASSERT_NE(row, std::string::npos) << key;
    // | `key` | type | default | meaning |
    const size_t type_end = doc.find('|', doc.find('|', row + 1) + 1);
    const std::string cell = doc.substr(type_end + 2, doc.find('|', type_end + 1) - type_end - 3);
    if (kRequired.count(key)) {
      EXPECT_EQ(cell, "**required**") << key;
      continue;
    }
    if (kNotLiteral.count(key)) continue;
    ASSERT_EQ(cell.front(), '`') << key << ": " << cell;
    const std::string value = cell.substr(1, cell.find('`', 1) - 1);
    if (key.starts_with("dpo.")) {
      const Recipe set = parse(std::string(kMinimal) + "dpo:\n", {kDpoFormat, key + "=" + value});
      EXPECT_EQ(set, with_dpo) << key << "=" << value;
      continue;
    }
    const bool lora = key.starts_with("lora.");
    const Recipe set = parse(std::string(kMinimal) + (lora ? "lora:\n" : ""), {key + "=" + value});
    EXPECT_EQ(recipe_to_yaml(set), recipe_to_yaml(lora ? with_lora : plain)) << key << "=" << value;
    EXPECT_EQ(set, lora ? with_lora : plain) << key << "=" << value;
  }
}

// The dpo section: TRL's defaults, a round trip through the effective recipe, and the checks
// across keys, one line each naming the key.
TEST(Recipe, DpoSection) {
  const std::string pairs = std::string(kMinimal) + "dpo:\n";
  const Recipe r = parse(pairs, {"data.format=preference"});
  ASSERT_TRUE(r.dpo.has_value());
  EXPECT_EQ(*r.dpo, DpoConfig{});
  EXPECT_FALSE(parse(kMinimal).dpo.has_value());
  const Recipe set = parse(kMinimal, {"data.format=preference", "dpo.loss_type=ipo", "dpo.beta=0.5",
                                      "dpo.reference=/models/ref"});
  EXPECT_EQ(set.dpo->loss_type, PreferenceLossType::kIpo);
  EXPECT_EQ(set.dpo->beta, 0.5);
  EXPECT_EQ(set.dpo->reference, "/models/ref");
  EXPECT_EQ(parse(recipe_to_yaml(set)), set);
  const auto error = [&](const std::vector<std::string>& overrides) {
    return testing::error_of([&] { parse(pairs, overrides); });
  };
  EXPECT_NE(error({"data.format=preference", "dpo.loss_type=kto"})
                .find("dpo.loss_type: invalid value 'kto' (valid: sigmoid, ipo, hinge, simpo)"),
            std::string::npos);
  EXPECT_NE(error({"data.format=preference", "dpo.beta=0"}).find("dpo.beta: must be > 0"),
            std::string::npos);
  EXPECT_NE(error({}).find("must be in format preference"), std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              parse(kMinimal, {"data.format=preference"});
            }).find("preference data trains with a dpo section"),
            std::string::npos);
  EXPECT_NE(error({"data.format=preference", "train.micro_batch_size=3"})
                .find("train.micro_batch_size: 3 rows cannot hold whole pairs"),
            std::string::npos);
  EXPECT_NE(error({"data.format=preference", "data.pack=true"})
                .find("data.pack: packing preference pairs is not supported yet"),
            std::string::npos);
  EXPECT_NE(error({"data.format=preference", "lora.rank=4", "dpo.reference=/models/ref"})
                .find("dpo.reference: with a lora section the reference is the base"),
            std::string::npos);
}

TEST(Recipe, ChatTemplateKeys) {
  const auto error = [](const std::string& override) -> std::string {
    return testing::error_of([&] { parse(kMinimal, {override}); });
  };
  EXPECT_EQ(error("data.template=chatml"),
            "override 'data.template=chatml': data.template: invalid value 'chatml' (valid: "
            "qwen2.5, qwen3, llama3)");
  EXPECT_EQ(error("data.enable_thinking=maybe"),
            "override 'data.enable_thinking=maybe': data.enable_thinking: expected true or false, "
            "got 'maybe'");
  EXPECT_EQ(parse(kMinimal, {"data.template=llama3"}).data.chat_template, "llama3");
  EXPECT_EQ(parse(kMinimal, {"data.template="}).data.chat_template, "");
  EXPECT_EQ(parse(kMinimal, {"data.enable_thinking=true"}).data.enable_thinking, true);
  EXPECT_EQ(parse(kMinimal, {"data.enable_thinking=~"}).data.enable_thinking, std::nullopt);
}

TEST(Recipe, EmptySectionsKeepDefaults) {
  Recipe r = parse(std::string(kMinimal) + "optimizer:\nschedule: {}\n");
  EXPECT_EQ(r.optimizer.name, OptimizerKind::kAdamW);
  EXPECT_EQ(r.schedule.name, ScheduleKind::kConstant);
}

TEST(Recipe, EveryKeyParsed) {
  Recipe r = parse(kFull);
  EXPECT_EQ(r.model.path, "/models/qwen2-0.5b");
  EXPECT_EQ(r.data.train, files({"/base/data/train.jsonl"}));
  EXPECT_EQ(r.data.format, DataFormat::kChat);
  EXPECT_EQ(r.data.tokenizer, "/base/tok/tokenizer.json");
  EXPECT_EQ(r.data.chat_template, "qwen3");
  EXPECT_EQ(r.data.enable_thinking, false);
  EXPECT_EQ(r.data.seq_len, 1024);
  EXPECT_EQ(r.data.overlong, Overlong::kDrop);
  EXPECT_TRUE(r.data.pack);
  EXPECT_FALSE(r.data.shuffle);
  EXPECT_TRUE(r.data.train_on_prompt);
  EXPECT_TRUE(r.data.skip_bad_lines);
  EXPECT_EQ(r.data.cache_dir, "/cache");
  EXPECT_EQ(r.optimizer.name, OptimizerKind::kSgd);
  EXPECT_EQ(r.optimizer.lr, 3e-4);
  EXPECT_EQ(r.optimizer.weight_decay, 0.1);
  EXPECT_EQ(r.optimizer.betas[0], 0.8);
  EXPECT_EQ(r.optimizer.betas[1], 0.95);
  EXPECT_EQ(r.optimizer.eps, 1e-6);
  EXPECT_EQ(r.optimizer.momentum, 0.9);
  EXPECT_EQ(r.schedule.name, ScheduleKind::kCosine);
  EXPECT_EQ(r.schedule.warmup_steps, 20);
  EXPECT_EQ(r.schedule.min_lr_ratio, 0.1);
  EXPECT_EQ(r.train.max_steps, 500);
  EXPECT_EQ(r.train.micro_batch_size, 4);
  EXPECT_EQ(r.train.grad_accum_steps, 8);
  EXPECT_EQ(r.train.grad_clip, 0.0);
  EXPECT_EQ(r.train.seed, 18446744073709551615ull);
  EXPECT_TRUE(r.train.activation_checkpointing);
  EXPECT_EQ(r.train.log_every, 10);
  EXPECT_EQ(r.output.dir, "/base/runs/full");
  EXPECT_EQ(r.output.dtype, DType::BF16);
}

// Each typed choice takes every name of its table (and nothing else, with the allowed names in
// the table's order in the error), and recipe_to_yaml writes the name back.
template <typename E, size_t N, typename Field>
void expect_choice(const std::string& key, const std::array<Named<E>, N>& table, Field field,
                   const std::string& allowed) {
  for (const Named<E>& n : table) {
    const Recipe r = parse(kMinimal, {key + "=" + n.name});
    EXPECT_EQ(field(r), n.value) << key << "=" << n.name;
    EXPECT_EQ(field(parse_recipe(recipe_to_yaml(r), "rt", "/")), n.value) << key;
  }
  EXPECT_EQ(
      error_of(kMinimal, {key + "=bogus"}),
      "override '" + key + "=bogus': " + key + ": invalid value 'bogus' (valid: " + allowed + ")");
}

TEST(Recipe, TypedChoicesTakeTheirTablesNames) {
  expect_choice(
      "dist.strategy", kShardStrategyNames, [](const Recipe& r) { return r.dist.strategy; },
      "full_shard, shard_grad_op, no_shard, hybrid_shard");
  expect_choice(
      "dist.reduce_dtype", kReduceDTypeNames, [](const Recipe& r) { return r.dist.reduce_dtype; },
      "fp32, bf16");
  expect_choice(
      "train.dtype", kComputeDTypeNames, [](const Recipe& r) { return r.train.dtype; },
      "fp32, bf16");
  expect_choice(
      "train.device", kDeviceRequestNames, [](const Recipe& r) { return r.train.device; },
      "auto, cpu, cuda");
  expect_choice(
      "optimizer.name", kOptimizerNames, [](const Recipe& r) { return r.optimizer.name; },
      "adamw, sgd");
  expect_choice(
      "schedule.name", kScheduleNames, [](const Recipe& r) { return r.schedule.name; },
      "constant, linear, cosine");
  expect_choice(
      "output.dtype", kOutputDTypeNames, [](const Recipe& r) { return r.output.dtype; },
      "f32, bf16");
}

TEST(Recipe, KeysListCoversDocumentedOrder) {
  const auto& keys = recipe_keys();
  // Every key is unique and in a known section; docs coverage is checked by Documentation.
  std::set<std::string> unique(keys.begin(), keys.end());
  EXPECT_EQ(unique.size(), keys.size());
  EXPECT_EQ(keys.front(), "model.path");
  for (const auto& k : keys) {
    const std::string section = k.substr(0, k.find('.'));
    EXPECT_TRUE(section == "model" || section == "lora" || section == "dpo" || section == "data" ||
                section == "optimizer" || section == "schedule" || section == "train" ||
                section == "output" || section == "dist" || section == "eval" ||
                section == "checkpoint" || section == "failure")
        << k;
  }
}

TEST(Recipe, DataPaths) {
  // data.tokenizer and data.cache_dir resolve like data.train; empty keeps the default.
  Recipe r = parse_recipe(
      "model: {path: m}\ndata: {train: t.jsonl, tokenizer: ../tok, cache_dir: ''}\noutput: {dir: "
      "o}\n",
      "r.yaml", "/recipes/sub", {});
  EXPECT_EQ(r.data.tokenizer, "/recipes/tok");
  EXPECT_EQ(r.data.cache_dir, "");
  r = parse_recipe(
      "model: {path: m}\ndata: {train: t, tokenizer:, cache_dir: c}\noutput: {dir: o}\n", "r.yaml",
      "/recipes", {"data.cache_dir=cache"});
  EXPECT_EQ(r.data.tokenizer, "");
  EXPECT_EQ(r.data.cache_dir, (fs::current_path() / "cache").string());
  EXPECT_HAS(error_of("model: {path: m}\ndata: {train: t, tokenizer: [a]}\noutput: {dir: o}\n"),
             "data.tokenizer: expected a string, got a list");
}

TEST(Recipe, Overrides) {
  Recipe r = parse(
      kMinimal, {"optimizer.lr=2e-4", "optimizer.betas=[0.9,0.95]",
                 "train.activation_checkpointing=true", "data.shuffle=no", "optimizer.name=sgd",
                 "train.seed=42", "output.dir=runs/b", "train.max_steps=7", "train.max_steps=9"});
  EXPECT_EQ(r.optimizer.lr, 2e-4);
  EXPECT_EQ(r.optimizer.betas[0], 0.9);
  EXPECT_EQ(r.optimizer.betas[1], 0.95);
  EXPECT_TRUE(r.train.activation_checkpointing);
  EXPECT_FALSE(r.data.shuffle);
  EXPECT_EQ(r.optimizer.name, OptimizerKind::kSgd);
  EXPECT_EQ(r.train.seed, 42u);
  EXPECT_EQ(r.output.dir, (fs::current_path() / "runs/b").string());
  EXPECT_EQ(r.train.max_steps, 9);  // the last override wins
}

TEST(Recipe, OverridesSupplyRequiredKeys) {
  Recipe r = parse("", {"model.path=/m", "data.train=/d.jsonl", "output.dir=out"});
  EXPECT_EQ(r.model.path, "/m");
  EXPECT_EQ(r.data.train, files({"/d.jsonl"}));
  EXPECT_EQ(r.output.dir, (fs::current_path() / "out").string());
}

TEST(Recipe, RelativeDataPath) {
  // In the file: against the recipe's directory, normalised.
  Recipe r = parse_recipe("model: {path: m}\ndata: {train: ../data/./t.jsonl}\noutput: {dir: o}\n",
                          "r.yaml", "/recipes/sub", {});
  EXPECT_EQ(r.data.train, files({"/recipes/data/t.jsonl"}));
  // An absolute path is kept.
  r = parse_recipe("model: {path: m}\ndata: {train: /abs/t.jsonl}\noutput: {dir: o}\n", "r.yaml",
                   "/recipes", {});
  EXPECT_EQ(r.data.train, files({"/abs/t.jsonl"}));
  // On the command line: against the current directory.
  r = parse_recipe(kMinimal, "r.yaml", "/recipes", {"data.train=t.jsonl"});
  EXPECT_EQ(r.data.train, files({(fs::current_path() / "t.jsonl").string()}));
}

// A fresh directory for one test; the test removes it.
fs::path temp_dir(const std::string& name) { return testing::fresh_dir("kiln_recipe_test", name); }

TEST(Recipe, LoadResolvesAgainstFileDirectory) {
  fs::path dir = temp_dir("load");
  write_file_atomic(dir / "r.yaml", kFull);
  Recipe r = load_recipe(dir / "r.yaml", {"train.seed=5"});
  EXPECT_EQ(r.data.train, files({(dir / "data/train.jsonl").string()}));
  EXPECT_EQ(r.train.seed, 5u);
  fs::remove_all(dir);
}

TEST(Recipe, YamlRoundTrip) {
  for (const char* text : {kMinimal, kFull}) {
    Recipe r = parse(text, {"optimizer.lr=0.1", "output.dir='a dir: with # odd chars'"});
    std::string yaml = recipe_to_yaml(r);
    Recipe back = parse_recipe(yaml, "saved.yaml", "/elsewhere", {});
    EXPECT_EQ(back, r) << yaml;
    EXPECT_EQ(recipe_to_yaml(back), yaml);
  }
  // Through a file in another directory, as the trainer saves it into the run directory.
  fs::path dir = temp_dir("run");
  Recipe r = parse(kFull);
  write_file_atomic(dir / "recipe.yaml", recipe_to_yaml(r));
  EXPECT_EQ(load_recipe(dir / "recipe.yaml"), r);
  fs::remove_all(dir);
}

TEST(Recipe, UnknownKeys) {
  std::string msg = error_of(std::string(kMinimal) + "train:\n  max_step: 5\n");
  EXPECT_HAS(msg, "recipe.yaml:8: unknown key 'train.max_step'");
  EXPECT_HAS(msg, "did you mean 'train.max_steps'?");

  msg = error_of(std::string(kMinimal) + "optimiser:\n  lr: 1\n");
  EXPECT_HAS(msg, "recipe.yaml:7: unknown key 'optimiser'");
  EXPECT_HAS(msg, "did you mean 'optimizer'?");

  msg = error_of(std::string(kMinimal) + "train:\n  lr: 1\n");
  EXPECT_HAS(msg, "unknown key 'train.lr' (did you mean 'optimizer.lr'?)");

  msg = error_of(std::string(kMinimal) + "optimizer.lr: 1\n");
  EXPECT_HAS(msg, "recipe.yaml:7: unknown key 'optimizer.lr' (nest it");

  msg = error_of(std::string(kMinimal) + "wandb: {project: x}\n");
  EXPECT_HAS(msg, "recipe.yaml:7: unknown key 'wandb'");
  EXPECT_EQ(msg.find("did you mean"), std::string::npos) << msg;
}

// Other tools' names (PEFT, torchtune, axolotl, the Hugging Face Trainer) are answered with
// kiln's key, in a section, at the top level (axolotl's flat files) and on the command line; a
// typo in a key's last component finds the key whatever the section.
TEST(Recipe, ForeignKeyNamesSayKilnsKey) {
  EXPECT_EQ(error_of(std::string(kMinimal) + "lora:\n  r: 8\n"),
            "recipe.yaml:8: unknown key 'lora.r' (PEFT's name; kiln's is 'lora.rank')");
  EXPECT_HAS(error_of(std::string(kMinimal) + "lora:\n  lora_alpha: 16\n"),
             "unknown key 'lora.lora_alpha' (PEFT's, torchtune's and axolotl's name; kiln's is "
             "'lora.alpha')");
  EXPECT_HAS(error_of(std::string(kMinimal) + "lora:\n  target_modules: [q_proj]\n"),
             "(PEFT's name; kiln's is 'lora.targets')");
  EXPECT_HAS(error_of(std::string(kMinimal) + "lora:\n  lora_dropout: 0.1\n"),
             "kiln's is 'lora.dropout'");
  EXPECT_HAS(error_of(kMinimal, {"train.gradient_accumulation_steps=4"}),
             "override 'train.gradient_accumulation_steps=4': unknown key "
             "'train.gradient_accumulation_steps' (the Hugging Face Trainer's, torchtune's and "
             "axolotl's name; kiln's is 'train.grad_accum_steps')");
  EXPECT_HAS(error_of(kMinimal, {"train.batch_size=4"}),
             "(torchtune's name; kiln's is 'train.micro_batch_size', rows per rank)");
  EXPECT_HAS(error_of(kMinimal, {"data.sequence_len=512"}),
             "(axolotl's name; kiln's is 'data.seq_len')");
  EXPECT_HAS(error_of(kMinimal, {"data.sample_packing=true"}),
             "(axolotl's name; kiln's is 'data.pack')");
  EXPECT_HAS(error_of(kMinimal, {"optimizer.learning_rate=1e-4"}), "kiln's is 'optimizer.lr'");
  EXPECT_EQ(error_of(std::string(kMinimal) + "warmup_ratio: 0.1\n"),
            "recipe.yaml:7: unknown key 'warmup_ratio' (the Hugging Face Trainer's and axolotl's "
            "name; kiln's is 'schedule.warmup_steps', a number of steps, not a fraction)");
  EXPECT_HAS(error_of(std::string(kMinimal) + "lora_r: 8\n"),
             "unknown key 'lora_r' (axolotl's name; kiln's is 'lora.rank')");
  // A typo in the last component, under another section.
  EXPECT_HAS(error_of(kMinimal, {"train.warmup_step=5"}),
             "unknown key 'train.warmup_step' (did you mean 'schedule.warmup_steps'?)");
  // Every foreign name points at a key kiln has, and is not one of kiln's own last components.
  for (const ForeignKey& f : foreign_recipe_keys()) {
    EXPECT_NE(std::find(recipe_keys().begin(), recipe_keys().end(), f.kiln_key),
              recipe_keys().end())
        << f.name;
    for (const std::string& k : recipe_keys()) EXPECT_NE(k.substr(k.rfind('.') + 1), f.name) << k;
  }
}

TEST(Recipe, DuplicateKeys) {
  std::string msg = error_of(std::string(kMinimal) + "train:\n  seed: 1\n  seed: 2\n");
  EXPECT_HAS(msg, "recipe.yaml:9: duplicate key 'train.seed' (also at recipe.yaml:8)");
  msg = error_of(std::string(kMinimal) + "model:\n  path: x\n");
  EXPECT_HAS(msg, "recipe.yaml:7: duplicate key 'model'");
}

TEST(Recipe, BadOverrides) {
  std::string msg = error_of(kMinimal, {"train.max_step=5"});
  EXPECT_HAS(msg, "override 'train.max_step=5': unknown key 'train.max_step'");
  EXPECT_HAS(msg, "did you mean 'train.max_steps'?");
  msg = error_of(kMinimal, {"train.seed"});
  EXPECT_HAS(msg, "override 'train.seed': expected dotted.key=value");
  msg = error_of(kMinimal, {"lr=1e-4"});
  EXPECT_HAS(msg, "unknown key 'lr' (did you mean 'optimizer.lr'?)");
  msg = error_of(kMinimal, {"optimizer=sgd"});
  EXPECT_HAS(msg, "unknown key 'optimizer'");
  msg = error_of(kMinimal, {"optimizer.betas=[0.9,"});
  EXPECT_HAS(msg, "override 'optimizer.betas=[0.9,': optimizer.betas: malformed YAML value");
  msg = error_of(kMinimal, {"optimizer.lr=abc"});
  EXPECT_HAS(msg, "override 'optimizer.lr=abc': optimizer.lr: expected a number, got 'abc'");
  msg = error_of(kMinimal, {"model.path="});
  EXPECT_HAS(msg, "model.path: expected a string, got an empty value");
}

TEST(Recipe, WrongTypes) {
  auto with = [](const std::string& extra) { return error_of(std::string(kMinimal) + extra); };
  EXPECT_HAS(with("optimizer:\n  lr: abc\n"),
             "recipe.yaml:8: optimizer.lr: expected a number, got 'abc'");
  EXPECT_HAS(with("optimizer:\n  lr: [1]\n"), "optimizer.lr: expected a number, got a list");
  EXPECT_HAS(with("optimizer:\n  lr:\n"), "optimizer.lr: expected a number, got an empty value");
  EXPECT_HAS(with("optimizer:\n  lr: .nan\n"), "optimizer.lr: expected a number, got '.nan'");
  EXPECT_HAS(with("train:\n  max_steps: 1.5\n"),
             "recipe.yaml:8: train.max_steps: expected an integer, got '1.5'");
  EXPECT_HAS(with("train:\n  max_steps: 99999999999999999999\n"),
             "train.max_steps: '99999999999999999999' is out of range");
  EXPECT_HAS(with("train:\n  micro_batch_size: 3000000000\n"),
             "train.micro_batch_size: 3000000000 is out of range (at most 2147483647)");
  EXPECT_HAS(with("train:\n  seed: -1\n"), "train.seed: expected a non-negative integer, got '-1'");
  EXPECT_HAS(with("train:\n  activation_checkpointing: maybe\n"),
             "recipe.yaml:8: train.activation_checkpointing: expected true or false, got 'maybe'");
  EXPECT_HAS(error_of("model: {path: m}\ndata:\n  train: t\n  shuffle: {a: 1}\n"),
             "recipe.yaml:4: data.shuffle: expected true or false, got a map");
  EXPECT_HAS(with("optimizer:\n  betas: 0.9\n"),
             "optimizer.betas: expected a list of two numbers, got '0.9'");
  EXPECT_HAS(with("optimizer:\n  betas: [0.9, 0.99, 0.999]\n"),
             "optimizer.betas: expected a list of two numbers, got a list");
  EXPECT_HAS(with("optimizer:\n  betas: [0.9, x]\n"),
             "optimizer.betas[1]: expected a number, got 'x'");
  EXPECT_HAS(error_of("model: [a]\n"), "recipe.yaml:1: model: expected a map of keys, got a list");
  EXPECT_HAS(error_of("just a string\n"), "recipe.yaml:1: expected a map of sections");
}

TEST(Recipe, OutOfRange) {
  auto with = [](const std::string& extra) { return error_of(std::string(kMinimal) + extra); };
  EXPECT_HAS(error_of("model: {path: m}\ndata:\n  train: t\n  seq_len: 1\n"),
             "recipe.yaml:4: data.seq_len: must be > 1, got 1");
  EXPECT_HAS(
      error_of("model: {path: m}\ndata:\n  train: t\n  format: csv\n"),
      "recipe.yaml:4: data.format: invalid value 'csv' (valid: tokens, chat, instruction, "
      "completion, text, sharegpt, preference (aliases: alpaca = instruction, openai = chat, "
      "messages "
      "= chat))");
  EXPECT_HAS(error_of("model: {path: m}\ndata:\n  train: t\n  overlong: wrap\n"),
             "recipe.yaml:4: data.overlong: invalid value 'wrap' (valid: truncate, drop)");
  EXPECT_HAS(with("optimizer:\n  name: adam\n"),
             "optimizer.name: invalid value 'adam' (valid: adamw, sgd)");
  EXPECT_HAS(with("optimizer:\n  lr: 0\n"),
             "optimizer.lr: must be in (0, 3.4028235e+38] (a float32), got 0");
  // Finite as a double, infinite as the float32 the optimizer computes in.
  EXPECT_HAS(with("optimizer:\n  lr: 1e39\n"),
             "optimizer.lr: must be in (0, 3.4028235e+38] (a float32), got 1e39");
  EXPECT_HAS(with("optimizer:\n  weight_decay: -0.1\n"),
             "optimizer.weight_decay: must be in [0, 3.4028235e+38] (a float32), got -0.1");
  EXPECT_HAS(with("optimizer:\n  betas: [0.9, 1.0]\n"),
             "optimizer.betas[1]: must be in [0, 1), got 1");
  EXPECT_HAS(with("optimizer:\n  eps: 0\n"), "optimizer.eps: must be in [1.17549435e-38, ");
  EXPECT_HAS(with("optimizer:\n  eps: 1e-50\n"), "a smaller one is 0 in fp32), got 1e-50");
  // A step holds every micro-batch: 1e9 of them is refused with the limit, not std::bad_alloc.
  EXPECT_HAS(with("train:\n  grad_accum_steps: 1000000000\n"),
             "train.grad_accum_steps 1000000000 x train.micro_batch_size 1 x data.seq_len 512 = "
             "512000000000 tokens in one step; at most 268435456");
  EXPECT_HAS(with("train:\n  grad_accum_steps: 1000000000\n"),
             "train.grad_accum_steps may be at most 524288 here");
  EXPECT_HAS(with("optimizer:\n  momentum: 1\n"), "optimizer.momentum: must be in [0, 1), got 1");
  EXPECT_HAS(with("schedule:\n  name: step\n"),
             "schedule.name: invalid value 'step' (valid: constant, linear, cosine)");
  EXPECT_HAS(with("schedule:\n  warmup_steps: -1\n"),
             "schedule.warmup_steps: must be >= 0, got -1");
  EXPECT_HAS(with("schedule:\n  min_lr_ratio: 1.5\n"),
             "schedule.min_lr_ratio: must be in [0, 1], got 1.5");
  EXPECT_HAS(with("train:\n  max_steps: 0\n"), "train.max_steps: must be > 0, got 0");
  EXPECT_HAS(with("train:\n  micro_batch_size: 0\n"), "train.micro_batch_size: must be > 0");
  EXPECT_HAS(with("train:\n  grad_accum_steps: -2\n"), "train.grad_accum_steps: must be > 0");
  EXPECT_HAS(with("train:\n  grad_clip: -1\n"), "train.grad_clip: must be >= 0, got -1");
  EXPECT_HAS(with("train:\n  log_every: 0\n"), "train.log_every: must be > 0, got 0");
  EXPECT_HAS(with("dist:\n  timeout_s: 1e300\n"),
             "dist.timeout_s: must be in (0, 604800] (a week), got 1e300");
  EXPECT_HAS(with("dist:\n  timeout_s: 0\n"), "dist.timeout_s: must be in (0, 604800]");
  EXPECT_HAS(with("dist:\n  nproc_per_node: 1025\n"),
             "dist.nproc_per_node: must be in [1, 1024], got 1025");
  EXPECT_HAS(with("dist:\n  nproc_per_node: 0\n"), "dist.nproc_per_node: must be in [1, 1024]");
  EXPECT_HAS(with("failure:\n  sigterm_grace_s: 0\n"),
             "failure.sigterm_grace_s: must be in (0, 3600], got 0");
  EXPECT_HAS(with("failure:\n  sigterm_grace_s: 1e300\n"),
             "failure.sigterm_grace_s: must be in (0, 3600], got 1e300");
  EXPECT_EQ(
      parse(std::string(kMinimal) + "failure:\n  sigterm_grace_s: 7.5\n").failure.sigterm_grace_s,
      7.5);
  EXPECT_HAS(error_of("model: {path: m}\ndata: {train: t}\noutput: {dir: o, dtype: f16}\n"),
             "recipe.yaml:3: output.dtype: invalid value 'f16' (valid: f32, bf16)");
}

TEST(Recipe, MissingRequiredKeys) {
  EXPECT_HAS(error_of("data: {train: t}\noutput: {dir: o}\n"),
             "recipe.yaml: missing required key 'model.path'");
  EXPECT_HAS(error_of("model: {path: m}\noutput: {dir: o}\n"),
             "recipe.yaml: missing required key 'data.train'");
  EXPECT_HAS(error_of("model: {path: m}\ndata: {train: t}\n"),
             "recipe.yaml: missing required key 'output.dir'");
  EXPECT_HAS(error_of(""), "missing required key 'model.path'");
  EXPECT_HAS(error_of("model: {path: ''}\ndata: {train: t}\noutput: {dir: o}\n"),
             "recipe.yaml:1: model.path: expected a non-empty string");
}

TEST(Recipe, MalformedYaml) {
  std::string msg = error_of("model:\n  path: m\ndata: [a,\n  train: x\n");
  EXPECT_HAS(msg, "recipe.yaml:");
  EXPECT_HAS(msg, "malformed YAML");
  msg = error_of("model:\n  path: m\n   bad: indentation\n");
  EXPECT_HAS(msg, "recipe.yaml:3:");
  EXPECT_HAS(msg, "malformed YAML");
  // 70k levels: yaml-cpp's own depth guard, reported like any malformed YAML, never a crash.
  msg = error_of("model: " + std::string(70000, '[') + std::string(70000, ']') + "\n");
  EXPECT_HAS(msg, "recipe.yaml:1:");
  EXPECT_HAS(msg, "malformed YAML");
}

// docs/recipe.md documents every key, and its example recipe loads.
TEST(Recipe, Documentation) {
  std::string doc = read_file(fs::path(KILN_SOURCE_DIR) / "docs/recipe.md");
  for (const std::string& key : recipe_keys()) EXPECT_HAS(doc, "| `" + key + "` |");
  for (const ForeignKey& f : foreign_recipe_keys()) {
    EXPECT_HAS(doc, "| `" + std::string(f.name) + "` | → `" + f.kiln_key + "` |");
  }
  size_t begin = doc.find("```yaml\n", doc.find("\n## Example"));
  ASSERT_NE(begin, std::string::npos);
  begin += 8;
  std::string example = doc.substr(begin, doc.find("```", begin) - begin);
  Recipe r = parse_recipe(example, "docs/recipe.md", "/docs", {});
  EXPECT_EQ(r.data.train, files({"/docs/data/train.jsonl"}));
  EXPECT_EQ(r.optimizer.betas[1], 0.95);
  EXPECT_EQ(r.output.dtype, DType::BF16);
}

// Every data format and alias of the data layer's one list is accepted (issue 22: the recipe kept
// its own list without sharegpt) and documented in docs/recipe.md's format table.
TEST(Recipe, DataFormatsAreTheDataLayersList) {
  const std::string doc = read_file(fs::path(KILN_SOURCE_DIR) / "docs/recipe.md");
  for (const std::string& name : data_format_names()) {
    // Preference data trains with a dpo section.
    const std::string text = std::string(kMinimal) + (name == "preference" ? "dpo:\n" : "");
    EXPECT_EQ(data_format_name(parse(text, {"data.format=" + name}).data.format), name);
    EXPECT_HAS(doc, "| `" + name + "` |");
  }
  for (const auto& [alias, format] : data_format_aliases()) {
    // Read as the format it names, so the effective recipe and run identity use one spelling.
    EXPECT_EQ(parse(kMinimal, {"data.format=" + alias}).data.format, format);
    EXPECT_HAS(recipe_to_yaml(parse(kMinimal, {"data.format=" + alias})),
               "  format: " + std::string(data_format_name(format)) + "\n");
    EXPECT_HAS(doc, "`" + alias + "` (= `" + std::string(data_format_name(format)) + "`)");
  }
}

// data.train entries: a path, or {path, format, weight}; several formats in one list; every form
// survives recipe_to_yaml and a load from elsewhere.
TEST(Recipe, TrainEntriesWithFormatAndWeight) {
  const char* text = R"(model: {path: /m}
data:
  train:
    - a.jsonl
    - {path: b.json, format: alpaca, weight: 0.5}
    - path: /abs/c.jsonl
      format: sharegpt
    - {path: d.jsonl, weight: 2}
  format: openai
output: {dir: /o}
)";
  const Recipe r = parse_recipe(text, "r.yaml", "/recipes", {});
  const std::vector<Recipe::TrainFile> want = {{"/recipes/a.jsonl", std::nullopt, 1.0},
                                               {"/recipes/b.json", DataFormat::kInstruction, 0.5},
                                               {"/abs/c.jsonl", DataFormat::kShareGpt, 1.0},
                                               {"/recipes/d.jsonl", std::nullopt, 2.0}};
  EXPECT_EQ(r.data.train, want);
  EXPECT_EQ(r.data.format, DataFormat::kChat);
  EXPECT_EQ(train_file_format(r, r.data.train[0]), DataFormat::kChat);
  EXPECT_EQ(train_file_format(r, r.data.train[1]), DataFormat::kInstruction);
  const std::string yaml = recipe_to_yaml(r);
  EXPECT_EQ(parse_recipe(yaml, "saved.yaml", "/elsewhere", {}), r) << yaml;
  // One entry alone, as an override (relative to the current directory).
  const Recipe one = parse(kMinimal, {"data.train={path: x.jsonl, format: text, weight: 3}"});
  EXPECT_EQ(one.data.train,
            (std::vector<Recipe::TrainFile>{
                {(fs::current_path() / "x.jsonl").string(), DataFormat::kText, 3}}));
  EXPECT_EQ(parse_recipe(recipe_to_yaml(one), "saved.yaml", "/elsewhere", {}), one);

  EXPECT_HAS(error_of(kMinimal, {"data.train=[{path: a, format: csv}]"}),
             "data.train[0].format: invalid value 'csv' (valid: tokens, chat");
  EXPECT_HAS(error_of(kMinimal, {"data.train=[a, {path: b, weight: 0}]"}),
             "data.train[1].weight: must be in (0, 1000], got 0");
  EXPECT_HAS(error_of(kMinimal, {"data.train=[{path: b, weight: x}]"}),
             "data.train[0].weight: expected a number, got 'x'");
  EXPECT_HAS(error_of(kMinimal, {"data.train=[{format: chat}]"}), "data.train[0]: missing 'path'");
  EXPECT_HAS(error_of(kMinimal, {"data.train=[{path: a, wieght: 2}]"}),
             "data.train[0]: unknown field 'wieght'");
}

TEST(Recipe, EvalSplit) {
  EXPECT_EQ(parse(kMinimal).data.eval_split, 0.0);
  const Recipe r = parse(kMinimal, {"data.eval_split=0.02"});
  EXPECT_EQ(r.data.eval_split, 0.02);
  EXPECT_EQ(parse_recipe(recipe_to_yaml(r), "saved.yaml", "/", {}), r);
  EXPECT_HAS(error_of(kMinimal, {"data.eval_split=1"}),
             "data.eval_split: must be in [0, 1), got 1");
  EXPECT_HAS(error_of(kMinimal, {"data.eval=/e.jsonl", "data.eval_split=0.1"}),
             "data.eval_split: holds out training data for evaluation, but data.eval (/e.jsonl) "
             "is set too");
}

TEST(Recipe, AllowLongContext) {
  EXPECT_FALSE(parse(kMinimal).data.allow_long_context);
  const Recipe r = parse(kMinimal, {"data.allow_long_context=true"});
  EXPECT_TRUE(r.data.allow_long_context);
  EXPECT_EQ(parse_recipe(recipe_to_yaml(r), "saved.yaml", "/", {}), r);
}

// Every path resolves one way: in the file against the file's directory, as an override against
// the current directory (issue 22: model.path and output.dir resolved against the working
// directory while data paths resolved against the recipe's).
TEST(Recipe, EveryPathResolvesAgainstTheRecipeFile) {
  const char* text = R"(model: {path: ../models/m}
data: {train: t.jsonl, tokenizer: tok, cache_dir: c, eval: e.jsonl}
train: {resume: runs/x/checkpoints/step-00000010}
output: {dir: runs/x}
)";
  Recipe r = parse_recipe(text, "r.yaml", "/work/recipes", {});
  EXPECT_EQ(r.model.path, "/work/models/m");
  EXPECT_EQ(r.data.train, files({"/work/recipes/t.jsonl"}));
  EXPECT_EQ(r.data.tokenizer, "/work/recipes/tok");
  EXPECT_EQ(r.data.cache_dir, "/work/recipes/c");
  EXPECT_EQ(r.data.eval, "/work/recipes/e.jsonl");
  EXPECT_EQ(r.train.resume, (ResumeFrom{ResumeMode::kCheckpoint,
                                        "/work/recipes/runs/x/checkpoints/step-00000010"}));
  EXPECT_EQ(parse_recipe(recipe_to_yaml(r), "saved.yaml", "/elsewhere", {}), r);
  EXPECT_EQ(r.output.dir, "/work/recipes/runs/x");
  const fs::path cwd = fs::current_path();
  r = parse_recipe(text, "r.yaml", "/work/recipes",
                   {"model.path=m", "output.dir=o", "train.resume=ck", "data.eval=e2.jsonl"});
  EXPECT_EQ(r.model.path, (cwd / "m").string());
  EXPECT_EQ(r.output.dir, (cwd / "o").string());
  EXPECT_EQ(r.train.resume, (ResumeFrom{ResumeMode::kCheckpoint, (cwd / "ck").string()}));
  EXPECT_EQ(r.data.eval, (cwd / "e2.jsonl").string());
  // The keywords of train.resume are not paths.
  EXPECT_EQ(parse(kMinimal, {"train.resume=auto"}).train.resume.mode, ResumeMode::kAuto);
  EXPECT_EQ(parse(kMinimal, {"train.resume=none"}).train.resume, ResumeFrom{});
  EXPECT_HAS(recipe_to_yaml(parse(kMinimal, {"train.resume=auto"})), "  resume: \"auto\"\n");
}

TEST(Recipe, MissingFile) { EXPECT_THROW(load_recipe("/nonexistent/recipe.yaml"), Error); }

TEST(Recipe, RequireTransport) {
  EXPECT_EQ(parse(kMinimal).dist.require_transport, std::nullopt);  // no requirement by default
  for (const char* kind : {"gloo-tcp", "socket", "loopback", "efa"}) {
    const auto got =
        parse(kMinimal, {std::string("dist.require_transport=") + kind}).dist.require_transport;
    ASSERT_TRUE(got.has_value()) << kind;
    EXPECT_EQ(name_of(kTransportKindNames, *got), std::string(kind));
  }
  EXPECT_EQ(parse(kMinimal, {"dist.require_transport="}).dist.require_transport, std::nullopt);
  EXPECT_EQ(parse(kMinimal, {"dist.require_transport=\"\""}).dist.require_transport, std::nullopt);
  EXPECT_HAS(error_of(kMinimal, {"dist.require_transport=infiniband"}),
             "dist.require_transport: invalid value 'infiniband' (valid: gloo-tcp, socket, "
             "loopback, efa)");
  // The effective recipe keeps it, and an empty one round-trips as "".
  Recipe r = parse(kMinimal, {"dist.require_transport=efa"});
  EXPECT_EQ(parse_recipe(recipe_to_yaml(r), "rt", "/").dist.require_transport, TransportKind::kEfa);
  EXPECT_HAS(recipe_to_yaml(parse(kMinimal)), "require_transport: \"\"\n");
  EXPECT_EQ(parse_recipe(recipe_to_yaml(parse(kMinimal)), "rt", "/").dist.require_transport,
            std::nullopt);
}

TEST(Recipe, Communicator) {
  EXPECT_EQ(parse(kMinimal).dist.communicator, CommRequest::kAuto);
  for (const char* c : {"auto", "nccl", "gloo"}) {
    EXPECT_EQ(name_of(kCommRequestNames,
                      parse(kMinimal, {std::string("dist.communicator=") + c}).dist.communicator),
              std::string(c));
  }
  EXPECT_HAS(error_of(kMinimal, {"dist.communicator=mpi"}),
             "dist.communicator: invalid value 'mpi' (valid: auto, nccl, gloo)");
  Recipe r = parse(kMinimal, {"dist.communicator=gloo"});
  EXPECT_EQ(parse_recipe(recipe_to_yaml(r), "rt", "/").dist.communicator, CommRequest::kGloo);
}

TEST(Recipe, AuthenticatePairs) {
  EXPECT_EQ(parse(kMinimal).dist.authenticate_pairs, PairAuth::kAuto);
  for (const char* v : {"auto", "on", "off"}) {
    EXPECT_EQ(
        name_of(
            kPairAuthNames,
            parse(kMinimal, {std::string("dist.authenticate_pairs=") + v}).dist.authenticate_pairs),
        std::string(v));
  }
  EXPECT_HAS(error_of(kMinimal, {"dist.authenticate_pairs=yes"}),
             "dist.authenticate_pairs: invalid value 'yes' (valid: auto, on, off)");
  Recipe r = parse(kMinimal, {"dist.authenticate_pairs=on"});
  EXPECT_EQ(parse_recipe(recipe_to_yaml(r), "rt", "/").dist.authenticate_pairs, PairAuth::kOn);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

const std::vector<LoraTarget> kAllTargets = {LoraTarget::kQ,   LoraTarget::kK,    LoraTarget::kV,
                                             LoraTarget::kO,   LoraTarget::kGate, LoraTarget::kUp,
                                             LoraTarget::kDown};

TEST(RecipeLora, NoSectionIsFullFineTuning) {
  const Recipe r = parse(kMinimal);
  EXPECT_EQ(r.lora, std::nullopt);
  EXPECT_EQ(r.model.adapter, "");
  EXPECT_EQ(recipe_to_yaml(r).find("lora"), std::string::npos);
}

TEST(RecipeLora, AnEmptySectionTakesTheDefaults) {
  for (const char* section : {"lora:\n", "lora: {}\n"}) {
    const Recipe r = parse(std::string(kMinimal) + section);
    ASSERT_TRUE(r.lora.has_value()) << section;
    EXPECT_EQ(r.lora->rank, 8);
    EXPECT_EQ(r.lora->alpha, 16.0);
    EXPECT_EQ(r.lora->dropout, 0.0);
    EXPECT_EQ(r.lora->targets, kAllTargets);  // kiln's default: every projection
    EXPECT_FALSE(r.lora->rslora);
  }
  // An override of a lora key makes the section too.
  EXPECT_EQ(parse(kMinimal, {"lora.rank=4"}).lora->rank, 4);
}

TEST(RecipeLora, EveryKey) {
  const Recipe r = parse(std::string(kMinimal) +
                         "lora: {rank: 16, alpha: 32, dropout: 0.05, targets: [v_proj, q_proj], "
                         "rslora: true}\n");
  ASSERT_TRUE(r.lora.has_value());
  EXPECT_EQ(r.lora->rank, 16);
  EXPECT_EQ(r.lora->alpha, 32.0);
  EXPECT_EQ(r.lora->dropout, 0.05);
  EXPECT_EQ(r.lora->targets, (std::vector<LoraTarget>{LoraTarget::kQ, LoraTarget::kV}));
  EXPECT_TRUE(r.lora->rslora);
  // all-linear as a string or a one-element list; one module name as a string.
  EXPECT_EQ(parse(kMinimal, {"lora.targets=all-linear"}).lora->targets, kAllTargets);
  EXPECT_EQ(parse(kMinimal, {"lora.targets=[all-linear]"}).lora->targets, kAllTargets);
  EXPECT_EQ(parse(kMinimal, {"lora.targets=down_proj"}).lora->targets,
            std::vector<LoraTarget>{LoraTarget::kDown});
  // The effective recipe loads to the same recipe.
  EXPECT_EQ(parse(recipe_to_yaml(r)), r);
}

TEST(RecipeLora, BadValuesNameTheFileAndKey) {
  const std::string base = std::string(kMinimal) + "lora:\n";
  EXPECT_EQ(error_of(base + "  rank: 0\n"), "recipe.yaml:8: lora.rank: must be > 0, got 0");
  EXPECT_EQ(error_of(base + "  rank: -4\n"), "recipe.yaml:8: lora.rank: must be > 0, got -4");
  EXPECT_EQ(error_of(kMinimal, {"lora.rank=2.5"}),
            "override 'lora.rank=2.5': lora.rank: expected an integer, got '2.5'");
  EXPECT_EQ(error_of(base + "  alpha: 0\n"),
            "recipe.yaml:8: lora.alpha: must be in (0, "
            "3.4028235e+38] (a float32), got 0");
  EXPECT_EQ(error_of(base + "  dropout: 1\n"),
            "recipe.yaml:8: lora.dropout: must be in [0, 1), "
            "got 1");
  EXPECT_HAS(error_of(base + "  targets: [q_proj, fc1]\n"),
             "recipe.yaml:8: lora.targets: target 'fc1' is not a module of this model (allowed: "
             "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or all-linear)");
  EXPECT_HAS(error_of(base + "  targets: []\n"),
             "recipe.yaml:8: lora.targets: expected "
             "all-linear or a list of module names, got an "
             "empty list");
  EXPECT_HAS(error_of(base + "  targets: [all-linear, q_proj]\n"), "stands alone");
  EXPECT_EQ(error_of(base + "  rnak: 4\n"),
            "recipe.yaml:8: unknown key 'lora.rnak' (did you mean 'lora.rank'?)");
  EXPECT_EQ(error_of(kMinimal, {"lora.scale=2"}),
            "override 'lora.scale=2': unknown key 'lora.scale'");
}

TEST(RecipeLora, AdapterIsAPathAndNeedsALoraSection) {
  Recipe r = parse_recipe(
      "model: {path: m, adapter: ../adapters/a}\nlora: {rank: 4}\ndata: {train: t}\noutput: {dir: "
      "o}\n",
      "r.yaml", "/recipes/sub", {});
  EXPECT_EQ(r.model.adapter, "/recipes/adapters/a");
  EXPECT_EQ(parse(recipe_to_yaml(r)), r);
  EXPECT_EQ(parse(kMinimal, {"model.adapter=ad", "lora.rank=4"}).model.adapter,
            (fs::current_path() / "ad").string());
  EXPECT_EQ(parse(kMinimal, {"model.adapter="}).model.adapter, "");
  EXPECT_HAS(error_of(kMinimal, {"model.adapter=ad"}),
             "override 'model.adapter=ad': model.adapter: continues training a PEFT adapter, but "
             "the recipe has no lora section");
}

}  // namespace
}  // namespace kiln
