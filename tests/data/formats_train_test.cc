// Every documented data format trains end to end through `kiln train` (issue 22: sharegpt was
// documented but refused by the recipe): a tiny model, the demo tokenizer, a few lines of data
// in each format of the data layer's one list, and the aliases; then files of several formats
// with weights in one run, with data.eval_split holding out evaluation data.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "common/run_kiln.h"
#include "data_test_util.h"
#include "kiln/base/json.h"
#include "kiln/data/formats.h"

namespace kiln {
namespace {

using test::TempDir;
using testing::run_kiln;

const fs::path kDemoTokenizer = fs::path(KILN_SOURCE_DIR) / "assets/tokenizer/demo/tokenizer.json";

// A few records of each format (the tiny model's vocabulary of 1024 holds the demo tokenizer's
// 663 ids and these token ids).
const std::map<std::string, std::string> kRecords = {
    {"chat",
     R"({"messages": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello, how can I help?"}]}
{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
{"messages": [{"role": "user", "content": "Name a colour"}, {"role": "assistant", "content": "Blue"}]}
{"messages": [{"role": "user", "content": "Say yes"}, {"role": "assistant", "content": "yes"}]}
)"},
    {"sharegpt",
     R"({"conversations": [{"from": "human", "value": "Hi there"}, {"from": "gpt", "value": "Hello!"}]}
{"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}], "system": "Be brief."}
{"conversations": [{"from": "human", "value": "A colour?"}, {"from": "gpt", "value": "Red"}]}
{"conversations": [{"from": "human", "value": "Say no"}, {"from": "gpt", "value": "no"}]}
)"},
    {"instruction",
     R"([{"instruction": "Greet", "input": "", "output": "Hello"},
 {"instruction": "Add", "input": "2 and 2", "output": "4"},
 {"instruction": "Name a colour", "output": "Green"},
 {"instruction": "Answer", "input": "yes or no", "output": "yes", "system": "Be brief."}]
)"},
    {"completion", R"({"prompt": "The sky is", "completion": " blue."}
{"prompt": "2+2=", "completion": "4"}
{"prompt": "Hello", "completion": ", world"}
{"prompt": "One, two,", "completion": " three"}
)"},
    {"text", R"({"text": "The quick brown fox jumps over the lazy dog."}
{"text": "Hello world"}
{"text": "A short line of text."}
{"text": "Another one."}
)"},
    // TRL's three forms of a pair in one file: standard, conversational, pre-tokenized.
    {"preference", R"({"prompt": "The sky is", "chosen": " blue.", "rejected": " loud."}
{"prompt": [{"role": "user", "content": "2+2?"}], "chosen": [{"role": "assistant", "content": "4"}], "rejected": [{"role": "assistant", "content": "5"}]}
{"prompt_input_ids": [1, 2, 3], "chosen_input_ids": [4, 5], "rejected_input_ids": [6]}
{"question": "Say yes", "chosen": "yes", "rejected": "no"}
)"},
    {"tokens", R"({"input_ids": [1, 2, 3, 4, 5, 6]}
{"input_ids": [7, 8, 9, 10], "labels": [-100, -100, 9, 10]}
{"input_ids": [11, 12, 13, 14, 15]}
{"input_ids": [16, 17, 18]}
)"},
};

class FormatsTrain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("formats_train");
    ASSERT_EQ(run_kiln("init --config tiny --seed 0 --out " + (*dir_ / "init").string()).code, 0);
    for (const auto& [format, text] : kRecords) {
      write_file_atomic(*dir_ / (format + (format == "instruction" ? ".json" : ".jsonl")), text);
    }
  }
  static void TearDownTestSuite() { delete dir_; }

  // `kiln train` in the test directory on a recipe whose data section is `data`.
  static testing::CmdResult train(const std::string& name, const std::string& data,
                                  const std::string& extra = "") {
    write_file_atomic(*dir_ / (name + ".yaml"), fmt::format(R"(model: {{path: init}}
data:
{}
  tokenizer: {}
  seq_len: 64
optimizer: {{lr: 1.0e-3}}
train: {{max_steps: 4, micro_batch_size: 1, log_every: 1}}
output: {{dir: runs/{}}}
dist: {{threads_per_worker: 1}}
)",
                                                            data, kDemoTokenizer.string(), name));
    return run_kiln("train " + name + ".yaml " + extra, "cd " + dir_->path().string() + " &&");
  }

  // The rows of a run's metrics.jsonl.
  static std::vector<Json> metrics(const std::string& name) {
    std::vector<Json> rows;
    const std::string text = read_file(*dir_ / ("runs/" + name + "/metrics.jsonl"));
    size_t at = 0;
    while (at < text.size()) {
      const size_t end = text.find('\n', at);
      rows.push_back(parse_json(text.substr(at, end - at), "metrics.jsonl"));
      at = end == std::string::npos ? text.size() : end + 1;
    }
    return rows;
  }

  static TempDir* dir_;
};
TempDir* FormatsTrain::dir_ = nullptr;

std::string file_of(const std::string& format) {
  return format + (format == "instruction" ? ".json" : ".jsonl");
}

// Every format of the one list trains: the run completes, every step's loss is finite and final/
// is written. A format added to the list without records here fails.
TEST_F(FormatsTrain, EveryFormatTrains) {
  for (const std::string& format : data_format_names()) {
    SCOPED_TRACE(format);
    ASSERT_TRUE(kRecords.count(format)) << "no records for format " << format;
    // Preference pairs train with a dpo section, two rows a pair.
    const std::string dpo = format == "preference" ? "dpo.beta=0.1 train.micro_batch_size=2" : "";
    const testing::CmdResult r =
        train(format, fmt::format("  train: {}\n  format: {}", file_of(format), format), dpo);
    ASSERT_EQ(r.code, 0) << r.out;
    const std::vector<Json> rows = metrics(format);
    ASSERT_EQ(rows.size(), 4u) << r.out;
    for (const Json& row : rows) EXPECT_TRUE(std::isfinite(row["loss"].get<double>())) << row;
    EXPECT_GT(rows.back()["targets"].get<int64_t>(), 0);
    EXPECT_TRUE(fs::exists(*dir_ / ("runs/" + format + "/final/model.safetensors")));
  }
}

TEST_F(FormatsTrain, AliasesTrainAsTheirFormat) {
  for (const auto& [alias, format] : data_format_aliases()) {
    SCOPED_TRACE(alias);
    const std::string f(data_format_name(format));
    const testing::CmdResult r =
        train("alias-" + alias, fmt::format("  train: {}\n  format: {}", file_of(f), alias));
    ASSERT_EQ(r.code, 0) << r.out;
    // The effective recipe names the format itself.
    EXPECT_HAS(read_file(*dir_ / ("runs/alias-" + alias + "/recipe.yaml")), "format: " + f + "\n");
  }
}

// Files of different formats, weighted, in one run, with a seeded held-out fraction evaluated.
TEST_F(FormatsTrain, MixedFormatsWeightsAndEvalSplit) {
  const testing::CmdResult r = train("mixed", R"(  train:
    - {path: chat.jsonl, format: openai, weight: 2}
    - {path: instruction.json, format: alpaca, weight: 0.5}
    - {path: sharegpt.jsonl, format: sharegpt}
    - text.jsonl
  format: text
  eval_split: 0.25)",
                                     "train.max_steps=6 eval.every_steps=3");
  ASSERT_EQ(r.code, 0) << r.out;
  // 1 held out of each 4-line file; then 2 x 3 chat + 2 of 3 instruction + 3 + 3.
  EXPECT_HAS(r.out, "data.eval_split 0.25: 4 examples held out for evaluation, 14 to train on");
  const std::vector<Json> rows = metrics("mixed");
  ASSERT_EQ(rows.size(), 6u);
  for (const Json& row : rows) EXPECT_TRUE(std::isfinite(row["loss"].get<double>())) << row;
  ASSERT_TRUE(rows[2].contains("eval_loss")) << rows[2];
  EXPECT_TRUE(std::isfinite(rows[5]["eval_loss"].get<double>()));
}

}  // namespace
}  // namespace kiln
