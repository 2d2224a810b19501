// The binary end to end with text data: kiln prepare-data (cache written, then hit), kiln train
// on the demo chat dataset packed (cache hit, the loss falls; two workers building the cache),
// kiln eval --format chat, and one-line errors for bad lines.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <regex>

#include "common/run_kiln.h"
#include "data_test_util.h"

namespace kiln {
namespace {

using test::TempDir;
using testing::run_kiln;

class DataCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("cli");
    ASSERT_EQ(run_kiln("init --config tiny --seed 0 --out " + (*dir_ / "init").string()).code, 0);
    fs::copy_file(fs::path(KILN_SOURCE_DIR) / "assets/demo/chat.jsonl", *dir_ / "chat.jsonl");
    write_file_atomic(*dir_ / "recipe.yaml", fmt::format(R"(model:
  path: init
data:
  train: chat.jsonl
  format: chat
  tokenizer: {}
  seq_len: 128
  pack: true
optimizer:
  lr: 1.0e-2
  betas: [0.9, 0.95]
schedule:
  warmup_steps: 5
train:
  max_steps: 40
  micro_batch_size: 2
  log_every: 10
output:
  dir: run
dist:
  threads_per_worker: 2
)",
                                                         test::kTinyTokenizer.string()));
  }
  static void TearDownTestSuite() { delete dir_; }

  // Runs kiln in the test directory.
  static testing::CmdResult kiln(const std::string& args) {
    return run_kiln(args, "cd " + dir_->path().string() + " &&");
  }

  static TempDir* dir_;
};
TempDir* DataCli::dir_ = nullptr;

TEST_F(DataCli, PrepareDataThenTrainHitsTheCacheAndLearns) {
  testing::CmdResult r = kiln("prepare-data recipe.yaml");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "chat.jsonl: 200 examples");
  EXPECT_HAS(r.out, "cache written: " + (dir_->path() / ".kiln-cache/chat-").string());
  r = kiln("prepare-data recipe.yaml");
  EXPECT_HAS(r.out, "cache hit:");

  r = kiln("train recipe.yaml");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "data cache hit");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(loss ([0-9.]+) -> ([0-9.]+))"))) << r.out;
  EXPECT_LT(std::stod(m[2]), std::stod(m[1]) - 2.0) << r.out;

  r = kiln(
      "eval --model run/final --data chat.jsonl --format chat --seq-len 128 --json --tokenizer " +
      test::kTinyTokenizer.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "\"loss\":");
}

TEST_F(DataCli, TwoWorkersBuildTheCacheOnce) {
  const testing::CmdResult r = kiln(
      "train recipe.yaml dist.nproc_per_node=2 dist.threads_per_worker=1 train.max_steps=4 "
      "output.dir=run2 data.cache_dir=cache2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "data cache written: " + (dir_->path() / "cache2").string());
  EXPECT_EQ(r.out.find("data cache written", r.out.find("data cache written") + 1),
            std::string::npos)
      << r.out;
}

TEST_F(DataCli, BadLinesFailOrAreSkipped) {
  write_file_atomic(
      dir_->path() / "bad.jsonl",
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})"
      "\n"
      R"({"messages": [{"role": "bot", "content": "x"}]})"
      "\n");
  testing::CmdResult r = kiln("train recipe.yaml data.train=bad.jsonl output.dir=run3");
  EXPECT_NE(r.code, 0);
  EXPECT_HAS(r.out, "kiln: error: " + (dir_->path() / "bad.jsonl").string() +
                        ":2: messages[0].role is 'bot', expected system, user, assistant or "
                        "tool\n");
  r = kiln("prepare-data recipe.yaml data.train=bad.jsonl data.skip_bad_lines=true");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "1 examples, ");
  EXPECT_HAS(r.out, "1 bad lines skipped");
  r = kiln("eval --model init --data bad.jsonl --format chat");
  EXPECT_NE(r.code, 0);
  EXPECT_HAS(r.out, "no tokenizer.json there");
}

// A chat template kiln does not know beside the tokenizer: one line naming data.template, until
// it is set; a thinking switch for a template without thinking: one line naming the key.
TEST_F(DataCli, UnknownChatTemplateNamesTheKey) {
  const fs::path tok = dir_->path() / "tok";
  fs::create_directories(tok);
  fs::copy_file(test::kTinyTokenizer, tok / "tokenizer.json", fs::copy_options::overwrite_existing);
  write_file_atomic(tok / "tokenizer_config.json", R"({"chat_template": "{{ messages }}"})");
  testing::CmdResult r = kiln("train recipe.yaml data.tokenizer=tok output.dir=run4");
  EXPECT_NE(r.code, 0);
  EXPECT_HAS(r.out, "kiln: error: " + (tok / "tokenizer_config.json").string() +
                        ": its chat template is not one kiln knows; set data.template to the one "
                        "it renders (qwen2.5, qwen3 or llama3)\n");
  r = kiln("prepare-data recipe.yaml data.tokenizer=tok data.template=qwen2.5");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "chat template qwen2.5");
  EXPECT_HAS(r.out, "the model's own chat template is not one kiln knows");
  r = kiln(
      "prepare-data recipe.yaml data.tokenizer=tok data.template=llama3 "
      "data.enable_thinking=false");
  EXPECT_NE(r.code, 0);
  EXPECT_HAS(r.out,
             "kiln: error: data.enable_thinking: the llama3 chat template has no thinking "
             "mode\n");
}

// The reproduction of issue 15: a 70k-deep text line crashed prepare-data in the error path.
TEST_F(DataCli, DeeplyNestedLineFailsNamingItOrIsSkipped) {
  write_file_atomic(dir_->path() / "deep.jsonl",
                    "{\"text\": \"hello\"}\n{\"text\":" + std::string(70000, '[') +
                        std::string(70000, ']') + "}\n");
  testing::CmdResult r = kiln("prepare-data recipe.yaml data.train=deep.jsonl data.format=text");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out,
             "kiln: error: " + (dir_->path() / "deep.jsonl").string() +
                 ":2: malformed JSON: nested deeper than 256 levels at line 2, column 264\n");
  r = kiln(
      "prepare-data recipe.yaml data.train=deep.jsonl data.format=text data.skip_bad_lines=true");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "1 examples, ");
  EXPECT_HAS(r.out, "1 bad lines skipped");
}

// A number no double holds (1e400) is a bad line like any other: named, and skippable.
TEST_F(DataCli, NumberOverflowIsABadLine) {
  write_file_atomic(dir_->path() / "n.jsonl", "{\"text\": \"hi\"}\n{\"text\": [1e400]}\n");
  testing::CmdResult r = kiln("prepare-data recipe.yaml data.train=n.jsonl data.format=text");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "kiln: error: " + (dir_->path() / "n.jsonl").string() + ":2: bad JSON value: ");
  r = kiln("prepare-data recipe.yaml data.train=n.jsonl data.format=text data.skip_bad_lines=true");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "1 bad lines skipped");
}

}  // namespace
}  // namespace kiln
