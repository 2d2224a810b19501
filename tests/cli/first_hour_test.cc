// What a new user meets in the first hour (issue 22), end to end through the binary: a preset
// sized for a real tokenizer (`kiln init --tokenizer`) trains and chats; the loss mask shown
// before training (`kiln tokenize --show-loss`); and the surprises: data.seq_len above the
// model's positions, one rule for relative paths, `kiln eval` inferring the format, a changed
// step budget on resume, the peak-memory line in words, and JSON errors at their real position.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <regex>

#include "common/kiln_split.h"
#include "common/run_kiln.h"
#include "common/temp_dir.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/data/formats.h"
#include "kiln/kernels/ops.h"
#include "kiln/text/tokenizer.h"

namespace kiln {
namespace {

using testing::CmdResult;

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

const fs::path kSource(KILN_SOURCE_DIR);
const fs::path kQwen = kSource / "assets/tokenizer/qwen3/tokenizer.json";
const fs::path kDemoTokenizer = kSource / "assets/tokenizer/demo/tokenizer.json";
const fs::path kChat = kSource / "assets/demo/chat.jsonl";
const fs::path kTokens = kSource / "assets/demo/tokens.jsonl";

class FirstHour : public ::testing::Test {
 protected:
  std::string path(const std::string& p) const { return (dir_ / p).string(); }

  // `kiln ARGS` run in `cwd` (default: the test directory); stdout and stderr together.
  CmdResult kiln(const std::string& args, const fs::path& cwd = {}) const {
    return testing::run_kiln(args, "cd '" + (cwd.empty() ? dir_ : cwd).string() + "' &&");
  }
  // The same with stdout and stderr apart, and `input` on stdin.
  testing::SplitResult kiln_split(const std::string& args, const std::string& input = "") const {
    return testing::run_kiln_split(args, dir_, input);
  }

  // A recipe training the model at `model` on the demo tokens (a few steps, one worker).
  std::string tokens_recipe(const std::string& name, const std::string& model, int steps) const {
    write_file_atomic(dir_ / (name + ".yaml"),
                      fmt::format(R"(model: {{path: {}}}
data: {{train: {}, seq_len: 64}}
optimizer: {{lr: 1.0e-3}}
train: {{max_steps: {}, micro_batch_size: 2}}
output: {{dir: {}}}
dist: {{threads_per_worker: 1}}
)",
                                  model, kTokens.string(), steps, path("runs/" + name)));
    return path(name + ".yaml");
  }

  testing::TempDir tmp_{"kiln_first_hour"};
  const fs::path dir_ = tmp_.path();
};

// Item 4: any preset becomes a model for a real tokenizer: the vocabulary sized from it (rounded up
// to a multiple of 128), bos/eos its special tokens, its files copied in; it trains on chat data
// with that tokenizer (the model directory's own) and generates.
TEST_F(FirstHour, InitWithATokenizerTrainsAndChats) {
  CmdResult r = kiln("init --config tiny --seed 2 --tokenizer " + kQwen.string() + " --out init");
  ASSERT_EQ(r.code, 0) << r.out;
  const Json config = read_json_file(dir_ / "init/config.json");
  EXPECT_EQ(config.at("vocab_size"), 151680);    // 151,669 ids -> the next multiple of 128
  EXPECT_EQ(config.at("bos_token_id"), 151643);  // <|endoftext|>
  EXPECT_EQ(config.at("eos_token_id"), 151645);  // <|im_end|>: a chat turn ends there
  EXPECT_EQ(read_file(dir_ / "init/tokenizer.json"), read_file(kQwen));  // byte for byte
  EXPECT_TRUE(read_json_file(dir_ / "init/tokenizer_config.json").contains("chat_template"));
  // Qwen2.5-Instruct's generation eos list: a turn's end, then the end of text.
  EXPECT_EQ(read_json_file(dir_ / "init/generation_config.json").at("eos_token_id"),
            Json({151645, 151643}));

  write_file_atomic(dir_ / "chat.yaml", fmt::format(R"(model: {{path: init}}
data: {{train: {}, format: chat, seq_len: 96, pack: true}}
optimizer: {{lr: 1.0e-3}}
train: {{max_steps: 3, micro_batch_size: 2}}
output: {{dir: run}}
dist: {{threads_per_worker: 2}}
)",
                                                    kChat.string()));
  r = kiln("train chat.yaml");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "step 3/3 | loss ");
  const auto g = kiln_split("generate --model " + path("run/final") +
                            " --chat --prompt 'What is the capital of Canada?' "
                            "--temperature 0 --max-new-tokens 4");
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_EQ(g.err.rfind("stop: ", 0), 0u) << g.err;

  // A smaller preset with the demo tokenizer: 663 ids -> 768 rows.
  r = kiln("init --config 25m --tokenizer " + kDemoTokenizer.parent_path().string() +
           " --out small");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(read_json_file(dir_ / "small/config.json").at("vocab_size"), 768);
  EXPECT_EQ(read_json_file(dir_ / "small/config.json").at("eos_token_id"), 658);
}

// Item 8: the rendered text with the spans that take loss marked, from the same tokens and labels
// training takes (LineEncoder), and a count per record.
TEST_F(FirstHour, TokenizeShowLossMarksWhatTrainingLearns) {
  const std::string line =
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]})";
  auto r = kiln_split("tokenize --tokenizer " + kDemoTokenizer.string() + " --chat --show-loss",
                      line + "\n");
  ASSERT_EQ(r.code, 0) << r.err;
  const Tokenizer tok = Tokenizer::load(kDemoTokenizer);
  const Example ex =
      LineEncoder(DataFormat::kChat, &tok, tok.vocab_size(), false).encode(line, "stdin:1");
  size_t learnt = 0;
  for (int32_t l : ex.labels) learnt += l != kIgnoreIndex;
  EXPECT_EQ(r.out,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
            "[[Hello!<|im_end|>]]\n" +
                fmt::format("# stdin:1: {} of {} tokens take loss\n", learnt, ex.input_ids.size()));
  // Another format of the one list, and train_on_prompt.
  r = kiln_split("tokenize --tokenizer " + kDemoTokenizer.string() +
                     " --show-loss --format completion --train-on-prompt",
                 R"({"prompt": "1+1=", "completion": "2"})"
                 "\n");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "[[1+1=2<|endoftext|>]]");
  r = kiln_split(
      "tokenize --tokenizer " + kDemoTokenizer.string() + " --show-loss --format completion",
      R"({"prompt": "1+1=", "completion": "2"})"
      "\n");
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "1+1=[[2<|endoftext|>]]");
  r = kiln_split("tokenize --tokenizer " + kDemoTokenizer.string() + " --show-loss --format tokens",
                 "{}\n");
  EXPECT_NE(r.code, 0);
  EXPECT_HAS(r.err, "--format: 'tokens' is not a text data format");
}

// Item 6: data.seq_len above max_position_embeddings is refused naming both values, unless
// data.allow_long_context.
TEST_F(FirstHour, SeqLenAboveTheModelsPositionsIsRefused) {
  ASSERT_EQ(kiln("init --config tiny --out init").code, 0);
  Json config = read_json_file(dir_ / "init/config.json");
  config["max_position_embeddings"] = 32;
  write_file_atomic(dir_ / "init/config.json", config.dump(2));
  const std::string recipe = tokens_recipe("long", path("init"), 2);
  CmdResult r = kiln("train " + recipe);
  EXPECT_NE(r.code, 0);
  EXPECT_HAS(r.out, "data.seq_len 64 is above the model's max_position_embeddings 32 (" +
                        path("init") + "/config.json)");
  EXPECT_HAS(r.out, "data.allow_long_context=true");
  r = kiln("train " + recipe + " data.allow_long_context=true");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "RoPE extrapolates");
}

// Item 6: every path in a recipe file resolves against the file's folder, wherever kiln runs;
// errors name the resolved path.
TEST_F(FirstHour, EveryPathInARecipeIsRelativeToItsFolder) {
  ASSERT_EQ(kiln("init --config tiny --out models/init").code, 0);
  fs::create_directories(dir_ / "recipes");
  fs::copy_file(kTokens, dir_ / "data.jsonl");
  write_file_atomic(dir_ / "recipes/r.yaml", R"(model: {path: ../models/init}
data: {train: ../data.jsonl, seq_len: 32}
train: {max_steps: 2}
output: {dir: ../runs/x}
dist: {threads_per_worker: 1}
)");
  CmdResult r = kiln("train " + path("recipes/r.yaml"), "/");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "runs/x/final/config.json"));
  EXPECT_HAS(read_file(dir_ / "runs/x/recipe.yaml"), "path: \"" + path("models/init") + "\"");
  // On the command line: relative to the working directory.
  r = kiln("train recipes/r.yaml output.dir=runs/y train.max_steps=1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "runs/y/final"));
  // A missing model or data file: the key, the resolved path and the rule.
  r = kiln("train recipes/r.yaml model.path=nope output.dir=runs/z");
  EXPECT_NE(r.code, 0);
  EXPECT_HAS(r.out, "model.path: " + path("nope") +
                        " is not a directory (a relative path in a recipe file is relative to "
                        "the file's folder, one on the command line to the working directory)");
  write_file_atomic(dir_ / "recipes/r2.yaml",
                    "model: {path: ../models/init}\ndata: {train: data.jsonl}\noutput: {dir: o}\n");
  r = kiln("train recipes/r2.yaml");
  EXPECT_NE(r.code, 0);
  EXPECT_HAS(r.out, "data.train: " + path("recipes/data.jsonl") + " does not exist");
}

// Item 6: kiln eval infers the format from the first record, or names the flag.
TEST_F(FirstHour, EvalInfersTheFormat) {
  ASSERT_EQ(kiln("init --config tiny --tokenizer " + kDemoTokenizer.string() + " --out init").code,
            0);
  const std::string chat = read_file(kChat);
  size_t end = 0;
  for (int i = 0; i < 8; ++i) end = chat.find('\n', end) + 1;  // the first 8 conversations
  write_file_atomic(dir_ / "chat.jsonl", chat.substr(0, end));
  CmdResult r = kiln("eval --model init --json --seq-len 128 --data chat.jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  const CmdResult given =
      kiln("eval --model init --json --seq-len 128 --format chat --data chat.jsonl");
  EXPECT_EQ(r.out, given.out);
  write_file_atomic(dir_ / "odd.jsonl", R"({"question": "q", "answer": "a"})"
                                        "\n");
  r = kiln("eval --model init --data odd.jsonl");
  EXPECT_NE(r.code, 0);
  EXPECT_HAS(r.out, "odd.jsonl:1: the first record has none of the fields that name a data format");
  EXPECT_HAS(r.out, "set it with --format (tokens, chat, instruction");
}

// Item 6: a changed step budget on resume is said at start, with both values; and the memory line
// says in words which of the prediction and the measured peak is larger (issue 34: "27.5% over"
// read as if the run was over its prediction). The end line says which steps this invocation
// trained (issue 34: a resume to step 5 from 3 said "trained 5 steps").
TEST_F(FirstHour, ResumeWithAnotherStepBudgetSaysSoAndMemoryInWords) {
  ASSERT_EQ(kiln("init --config tiny --out init").code, 0);
  const std::string recipe = tokens_recipe("budget", path("init"), 3);
  CmdResult r = kiln("train " + recipe + " schedule.name=cosine");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(predicted \d+ MiB \((the prediction was \d+\.\d% (above|below) the )"
                        R"(measured peak|the prediction matches the measured peak)\))")))
      << r.out;
  EXPECT_FALSE(std::regex_search(r.out, std::regex(R"(predicted \d+ MiB \([+-])"))) << r.out;
  EXPECT_HAS(r.out, "trained 3 steps: loss ");
  r = kiln("train " + recipe + " schedule.name=cosine train.resume=auto train.max_steps=5");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out,
             "with another step budget: train.max_steps was 3, is 5; the run now ends at "
             "step 5 and the cosine schedule decays to it");
  EXPECT_HAS(r.out, "step 5/5");
  EXPECT_HAS(r.out, "trained steps 4-5 (2 this run): loss ");
}

// Item 6: a JSON syntax error names its line and column in the file, a trailing comma included
// (a JSON array data file's used to read "line 1, column 1: unexpected end of input").
TEST_F(FirstHour, JsonErrorsNameTheRealPosition) {
  ASSERT_EQ(kiln("init --config tiny --tokenizer " + kDemoTokenizer.string() + " --out init").code,
            0);
  write_file_atomic(dir_ / "arr.json", "[\n  {\"text\": \"a\"},\n  {\"text\": \"b\"},\n]\n");
  CmdResult r = kiln("eval --model init --data arr.json --format text");
  EXPECT_NE(r.code, 0);
  EXPECT_HAS(r.out,
             "arr.json:3: malformed JSON array: a ',' after the last element at line 3, column 16");
  write_file_atomic(dir_ / "obj.json", "[\n  {\"text\": \"a\"},\n  {\"text\": \"b\",}\n]\n");
  r = kiln("eval --model init --data obj.json --format text");
  EXPECT_HAS(r.out,
             "obj.json:3: malformed JSON: syntax error while parsing object key - "
             "unexpected '}'; expected string literal at line 3, column 16");
  const std::string text = read_file(dir_ / "init/config.json");
  const size_t brace = text.rfind('}');
  ASSERT_NE(brace, std::string::npos);
  const std::string config = text.substr(0, brace) + ",}\n";  // {..., "vocab_size": 768\n,}
  write_file_atomic(dir_ / "init/config.json", config);
  const size_t lines = static_cast<size_t>(std::count(config.begin(), config.end(), '\n'));
  r = kiln("eval --model init --data arr.json --format text");
  EXPECT_HAS(r.out, fmt::format("config.json: malformed JSON: syntax error while parsing object "
                                "key - unexpected '}}'; expected string literal at line {}, "
                                "column 2",
                                lines));
}

}  // namespace
}  // namespace kiln
