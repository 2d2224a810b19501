// End-to-end tests of `kiln generate` on a tiny random model whose vocabulary is the vendored
// Qwen3 tokenizer's: greedy output equals the library's greedy decoding, runs are reproducible
// (greedy, and sampling for a given seed), the prompt can come from stdin, chat and interactive
// modes run, and bad input fails with one line.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/kiln_split.h"
#include "common/run_kiln.h"
#include "common/test_backend.h"
#include "kiln/base/file.h"
#include "kiln/model/config.h"
#include "kiln/model/generate.h"
#include "kiln/model/sampling.h"
#include "kiln/model_files/hf_checkpoint.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/tokenizer.h"

namespace kiln {
namespace {

using CmdResult = testing::SplitResult;
using testing::expect_one_line_error;

const fs::path kTokenizer = fs::path(KILN_SOURCE_DIR) / "assets/tokenizer/qwen3/tokenizer.json";

class GenerateCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Per process: CTest runs each test of this suite in its own process, in parallel.
    dir_ = fs::temp_directory_path() / ("kiln_generate_cli_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // The tiny preset with the tokenizer's vocabulary (151643 BPE tokens + 26 added: 151669).
    ModelConfig c = preset_config("tiny");
    c.vocab_size = Tokenizer::load(kTokenizer).vocab_size();
    write_file_atomic(dir_ / "config.json", config_to_json(c).dump(2));
    const CmdResult r =
        kiln("init --config " + (dir_ / "config.json").string() + " --seed 3 --out " + model());
    ASSERT_EQ(r.code, 0) << r.err;
    fs::copy_file(kTokenizer, fs::path(model()) / "tokenizer.json");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string model() { return (dir_ / "model").string(); }

  // Runs `kiln <args>` with `input` on stdin; stdout and stderr apart.
  static CmdResult kiln(const std::string& args, const std::string& input = "") {
    return testing::run_kiln_split(args, dir_, input);
  }

  static fs::path dir_;
};

fs::path GenerateCli::dir_;

// What kiln generate prints for `prompt` at temperature 0, computed with the library: up to
// max_new tokens, stopping at any of `stop_tokens` (Qwen's by default), from the model directory
// `model` loaded as kiln generate loads it.
std::vector<int32_t> greedy_reply(const std::string& model, const Tokenizer& tok,
                                  const std::vector<int32_t>& prompt, size_t max_new,
                                  std::vector<std::string_view> stop_tokens = {"<|im_end|>",
                                                                               "<|endoftext|>"}) {
  const ModelConfig c = read_config(fs::path(model) / "config.json");
  const ParamLayout layout(c);
  ParamStore params(layout, testing::cpu_fp32(), /*with_grads=*/false);
  load_hf_weights(model, layout, params);
  Generator gen(c, params, testing::cpu_fp32());
  Sampler greedy({0.0, 1.0}, 0);
  std::vector<int32_t> reply;
  std::span<const float> logits = gen.prefill(prompt);
  std::vector<int32_t> stops;
  for (const std::string_view t : stop_tokens) stops.push_back(tok.token_id(t));
  while (reply.size() < max_new) {
    const int32_t id = greedy.sample(logits);
    if (std::find(stops.begin(), stops.end(), id) != stops.end()) break;
    reply.push_back(id);
    logits = gen.step(id);
  }
  return reply;
}

TEST_F(GenerateCli, GreedyIsDeterministicAndMatchesTheLibrary) {
  const std::string args =
      "generate --model " + model() + " --prompt hi --max-new-tokens 5 --temperature 0";
  const CmdResult a = kiln(args), b = kiln(args);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);

  // The same five tokens from the Generator directly.
  const Tokenizer tok = Tokenizer::load(kTokenizer);
  const std::vector<int32_t> reply = greedy_reply(model(), tok, tok.encode("hi"), 5);
  EXPECT_EQ(a.out, tok.decode(reply) + "\n");
  // The only line on stderr says why it stopped.
  if (reply.size() == 5) {
    EXPECT_EQ(a.err, "stop: length (--max-new-tokens 5) after 5 new tokens\n");
  } else {
    EXPECT_EQ(a.err.rfind("stop: end token <|", 0), 0u) << a.err;
  }

  // The whole of stdin is the prompt when there is no --prompt (its last newline dropped).
  const CmdResult s =
      kiln("generate --model " + model() + " --max-new-tokens 5 --temperature 0", "hi\n");
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_EQ(s.out, a.out);
}

// A model that always answers a stop token: every logit is E[j][0] * h0 (the final norm keeps
// only the first channel), and E[<|im_end|>][0] = -E[<|endoftext|>][0] = 1e3 dwarfs the rest, so
// the argmax is one of the two whatever the sign of h0. Issue 22: such a run printed nothing and
// exited 0; now stderr says it ended at an end token.
TEST_F(GenerateCli, EndsWithAStopReasonOnStderr) {
  const ModelConfig c = read_config(fs::path(model()) / "config.json");
  const ParamLayout layout(c);
  ParamStore params(layout, testing::cpu_fp32(), /*with_grads=*/false);
  load_hf_weights(model(), layout, params);
  const Tokenizer tok = Tokenizer::load(kTokenizer);
  std::vector<float> embed(layout.units()[layout.embed_unit()].numel);
  params.read_unit(layout.embed_unit(), embed.data());
  const auto C = static_cast<size_t>(c.hidden_size);
  embed[static_cast<size_t>(tok.token_id("<|im_end|>")) * C] = 1e3f;
  embed[static_cast<size_t>(tok.token_id("<|endoftext|>")) * C] = -1e3f;
  params.load_unit(layout.embed_unit(), embed.data());
  const ParamUnit& head = layout.units()[layout.head_unit()];
  std::vector<float> norm(head.numel);
  params.read_unit(layout.head_unit(), norm.data());
  const ParamEntry& w = head.entry("model.norm.weight");
  std::fill(norm.begin() + static_cast<ptrdiff_t>(w.offset),
            norm.begin() + static_cast<ptrdiff_t>(w.offset + w.numel), 0.0f);
  norm[w.offset] = 1.0f;
  params.load_unit(layout.head_unit(), norm.data());
  const fs::path stops = dir_ / "stops";
  save_hf_checkpoint(stops, c, layout, params, DType::F32);
  fs::copy_file(kTokenizer, stops / "tokenizer.json");

  CmdResult r = kiln("generate --model " + stops.string() + " --prompt hi --temperature 0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "\n");
  EXPECT_TRUE(r.err == "stop: end token <|im_end|> after 0 new tokens\n" ||
              r.err == "stop: end token <|endoftext|> after 0 new tokens\n")
      << r.err;
  // And at the length limit, with the original model.
  r = kiln("generate --model " + model() + " --prompt hi --temperature 0 --max-new-tokens 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "stop: length (--max-new-tokens 1) after 1 new tokens\n");
}

TEST_F(GenerateCli, SamplingIsReproducibleForASeed) {
  const std::string args = "generate --model " + model() +
                           " --prompt 'Once upon a time' --max-new-tokens 8 --temperature 1.0 "
                           "--top-p 0.95 --seed ";
  const CmdResult a = kiln(args + "11"), b = kiln(args + "11"), other = kiln(args + "12");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, other.out);  // near-uniform over 151669 tokens: a clash is vanishingly rare
}

TEST_F(GenerateCli, ChatAndInteractive) {
  const std::string base = "generate --model " + model() + " --max-new-tokens 4 --temperature 0 ";
  const CmdResult chat = kiln(base + "--chat --system 'Be brief.' --prompt hello");
  ASSERT_EQ(chat.code, 0) << chat.err;
  EXPECT_FALSE(chat.out.empty());
  // --tokenizer given explicitly, as a file
  const CmdResult explicit_tok =
      kiln(base + "--chat --system 'Be brief.' --prompt hello --tokenizer " + kTokenizer.string());
  EXPECT_EQ(explicit_tok.out, chat.out);

  // Interactive chat: the first turn answers as --chat --prompt does; the second goes on from the
  // conversation, twice the same.
  const std::string two_turns = "hello\n\nand then?\n";
  const CmdResult i1 = kiln(base + "--chat --system 'Be brief.' --interactive", two_turns);
  const CmdResult i2 = kiln(base + "--chat --system 'Be brief.' --interactive", two_turns);
  ASSERT_EQ(i1.code, 0) << i1.err;
  EXPECT_EQ(i1.out, i2.out);
  EXPECT_EQ(i1.out.rfind(chat.out, 0), 0u) << i1.out;
  EXPECT_GT(i1.out.size(), chat.out.size());

  // Interactive raw text: each line is a prompt of its own.
  const CmdResult raw = kiln(base + "--interactive", "hi\nhi\n");
  ASSERT_EQ(raw.code, 0) << raw.err;
  const CmdResult once = kiln(base + "--prompt hi");
  EXPECT_EQ(raw.out, once.out + once.out);
}

// --tools renders the definitions into the system prompt: the CLI's greedy reply is the
// Generator's from encode_chat with the same tools.
TEST_F(GenerateCli, ChatWithTools) {
  const std::string tools =
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])";
  write_file_atomic(dir_ / "tools.json", tools);
  const CmdResult r = kiln("generate --model " + model() +
                           " --chat --prompt hi --max-new-tokens 6 --temperature 0 --tools " +
                           (dir_ / "tools.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const Tokenizer tok = Tokenizer::load(kTokenizer);
  const std::vector<int32_t> prompt =
      encode_chat(tok, chat_template(ChatTemplateId::kQwen25), {{"user", "hi"}},
                  {parse_json_ordered(tools, "tools")[0]}, {.add_generation_prompt = true}, false);
  ASSERT_NE(tok.decode(prompt).find("<tools>\n{\"type\": \"function\""), std::string::npos);
  const std::vector<int32_t> reply = greedy_reply(model(), tok, prompt, 6);
  EXPECT_EQ(r.out, tok.decode(reply) + "\n");

  write_file_atomic(dir_ / "bad_tools.json", R"([{"type": "function"}, 3])");
  expect_one_line_error(
      kiln("generate --model " + model() + " --chat --prompt hi --tools " +
           (dir_ / "bad_tools.json").string()),
      (dir_ / "bad_tools.json").string() + "[1] is a JSON number, expected an object");
  expect_one_line_error(kiln("generate --model " + model() + " --prompt hi --tools x.json"),
                        "--tools needs --chat");
}

TEST_F(GenerateCli, OneLineErrors) {
  const fs::path bare = dir_ / "bare";
  fs::create_directories(bare);
  for (const char* f : {"config.json", "model.safetensors"}) {
    fs::copy_file(fs::path(model()) / f, bare / f, fs::copy_options::overwrite_existing);
  }
  expect_one_line_error(kiln("generate --model " + bare.string() + " --prompt hi"),
                        "tokenizer.json: no such file; pass --tokenizer");
  expect_one_line_error(kiln("generate --model " + model() + " --prompt hi --system x"),
                        "--system needs --chat");
  expect_one_line_error(kiln("generate --model " + model() + " --prompt ''"), "prompt is empty");
  expect_one_line_error(kiln("generate --model " + (dir_ / "nope").string() + " --prompt hi"),
                        "config.json");
}

// The CLI's greedy reply for `args` equals the library's for `prompt`, stopping at `stops`.
void expect_reply(const CmdResult& r, const std::string& model, const Tokenizer& tok,
                  const std::vector<int32_t>& prompt, std::vector<std::string_view> stops) {
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, tok.decode(greedy_reply(model, tok, prompt, 6, std::move(stops))) + "\n");
}

// Qwen3's template with thinking off: the prompt ends with the empty think block.
TEST_F(GenerateCli, Qwen3ThinkingOff) {
  const CmdResult r = kiln("generate --model " + model() +
                           " --chat --template qwen3 --enable-thinking false --prompt hi "
                           "--max-new-tokens 6 --temperature 0");
  const Tokenizer tok = Tokenizer::load(kTokenizer);
  const std::vector<int32_t> prompt =
      encode_chat(tok, chat_template(ChatTemplateId::kQwen3), {{"user", "hi"}}, {},
                  {.add_generation_prompt = true, .enable_thinking = false}, false);
  ASSERT_EQ(tok.decode(prompt),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
            "<think>\n\n</think>\n\n");
  expect_reply(r, model(), tok, prompt, {"<|im_end|>", "<|endoftext|>"});
  expect_one_line_error(kiln("generate --model " + model() + " --prompt hi --enable-thinking true"),
                        "--enable-thinking needs --chat");
  expect_one_line_error(
      kiln("generate --model " + model() + " --chat --prompt hi --enable-thinking true"),
      "--enable-thinking: the qwen2.5 chat template has no thinking mode");
}

// A tokenizer with a gap in its ids (the Llama-3-style test tokenizer: 0..272, then 128000..):
// sampling never picks an id it lacks, which would fail to decode mid-reply.
TEST_F(GenerateCli, SamplingSkipsIdsTheTokenizerLacks) {
  const fs::path tok_json =
      fs::path(KILN_SOURCE_DIR) / "tests/fixtures/tokenizer/llama3_tiny_tokenizer.json";
  const std::string llama = (dir_ / "gaps").string();
  ASSERT_EQ(
      kiln("init --config tiny-llama --seed 5 --tokenizer " + tok_json.string() + " --out " + llama)
          .code,
      0);
  for (int seed : {1, 2, 3}) {
    const CmdResult r = kiln("generate --model " + llama +
                             " --prompt hello --temperature 1.5 --max-new-tokens 32 " + "--seed " +
                             std::to_string(seed));
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("stop: "), std::string::npos) << r.err;
  }
}

// A model with Llama 3's tokenizer layout (a tiny vocabulary): a chat renders with the llama3
// template (one <|begin_of_text|>, its own) and stops at <|eot_id|>; a plain prompt begins with
// the post-processor's <|begin_of_text|>, as Hugging Face's tokenizer(text) gives it.
TEST_F(GenerateCli, Llama3TemplateAndBeginOfText) {
  const fs::path tok_json =
      fs::path(KILN_SOURCE_DIR) / "tests/fixtures/tokenizer/llama3_tiny_tokenizer.json";
  const Tokenizer tok = Tokenizer::load(tok_json);
  const std::string llama = (dir_ / "llama").string();
  ModelConfig c = preset_config("tiny");
  c.vocab_size = tok.vocab_size();
  write_file_atomic(dir_ / "llama_config.json", config_to_json(c).dump(2));
  ASSERT_EQ(
      kiln("init --config " + (dir_ / "llama_config.json").string() + " --seed 5 --out " + llama)
          .code,
      0);
  fs::copy_file(tok_json, fs::path(llama) / "tokenizer.json");
  const std::string base = "generate --model " + llama + " --max-new-tokens 6 --temperature 0 ";

  const std::vector<int32_t> chat_prompt =
      encode_chat(tok, chat_template(ChatTemplateId::kLlama3), {{"user", "hello"}}, {},
                  {.add_generation_prompt = true}, false);
  EXPECT_EQ(std::count(chat_prompt.begin(), chat_prompt.end(), 128000), 1);
  expect_reply(kiln(base + "--chat --template llama3 --prompt hello"), llama, tok, chat_prompt,
               {"<|end_of_text|>", "<|eot_id|>", "<|eom_id|>"});
  // --date-string: the date of the system block ("Today Date: ..."; default the template's), seen
  // in the prompt's length (the debug log's "prompt N tokens"): this model's reply is the same.
  const std::string date = "Thursday, 1 January 2031";
  const std::vector<int32_t> dated =
      encode_chat(tok, chat_template(ChatTemplateId::kLlama3), {{"user", "hello"}}, {},
                  {.add_generation_prompt = true, .date_string = date}, false);
  ASSERT_NE(dated.size(), chat_prompt.size());
  const std::string dated_args =
      "--chat --template llama3 --date-string '" + date + "' --prompt hello";
  expect_reply(kiln(base + dated_args), llama, tok, dated,
               {"<|end_of_text|>", "<|eot_id|>", "<|eom_id|>"});
  for (const auto& [args, want] :
       {std::pair{dated_args, dated.size()},
        std::pair{std::string("--chat --template llama3 --prompt hello"), chat_prompt.size()}}) {
    const testing::CmdResult r = testing::run_kiln(base + args, "KILN_LOG_LEVEL=debug");
    EXPECT_NE(r.out.find(fmt::format("prompt {} tokens", want)), std::string::npos) << r.out;
  }
  expect_one_line_error(kiln(base + "--prompt hello --date-string x"),
                        "--date-string needs --chat");
  expect_one_line_error(kiln(base + "--chat --template qwen3 --prompt hello --date-string x"),
                        "--date-string: the qwen3 chat template shows no date");
  // The template known by content from the model's own tokenizer_config.json.
  write_file_atomic(
      fs::path(llama) / "tokenizer_config.json",
      Json{{"chat_template", std::string(chat_template(ChatTemplateId::kLlama3).jinja())}}.dump());
  expect_reply(kiln(base + "--chat --prompt hello"), llama, tok, chat_prompt,
               {"<|end_of_text|>", "<|eot_id|>", "<|eom_id|>"});

  const std::vector<int32_t> plain = tok.encode_with_special_tokens("hello");
  ASSERT_EQ(plain, (std::vector<int32_t>{128000, 260}));
  expect_reply(kiln(base + "--prompt hello"), llama, tok, plain,
               {"<|end_of_text|>", "<|eot_id|>", "<|eom_id|>"});

  // A template kiln does not know: --chat needs --template; a plain prompt does not.
  write_file_atomic(fs::path(llama) / "tokenizer_config.json", R"({"chat_template": "{{ x }}"})");
  expect_one_line_error(kiln(base + "--chat --prompt hello"),
                        "tokenizer_config.json: its chat template is not one kiln knows; set "
                        "--template to the one it renders");
  expect_reply(kiln(base + "--prompt hello"), llama, tok, plain, {"<|end_of_text|>"});
  expect_one_line_error(kiln(base + "--chat --template llama3 --enable-thinking false --prompt x"),
                        "--enable-thinking: the llama3 chat template has no thinking mode");
}

}  // namespace
}  // namespace kiln
