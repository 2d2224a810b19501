// The chat template and special tokens of the directories kiln writes (issue 34): `kiln init
// --tokenizer` gives a fresh model its family's template, special tokens and generation config
// (or keeps the tokenizer's own template), and `--template` on init and export sets one.
#include <gtest/gtest.h>

#include "common/run_kiln.h"
#include "common/temp_dir.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/chat_template_choice.h"

namespace kiln {
namespace {

using testing::CmdResult;

const fs::path kSource = KILN_SOURCE_DIR;
const fs::path kQwen3Dir = kSource / "assets/tokenizer/qwen3";
const fs::path kDemoDir = kSource / "assets/tokenizer/demo";
const fs::path kLlamaJson = kSource / "tests/fixtures/tokenizer/llama3_tiny_tokenizer.json";

std::string published(const char* file) {
  return read_file(kSource / "assets/chat_templates" / file);
}

bool has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

size_t count_lines_with(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

class ChatTemplateFiles : public ::testing::Test {
 protected:
  fs::path p(const std::string& name) const { return dir_ / name; }
  CmdResult kiln(const std::string& args) const { return testing::run_kiln(args); }
  // `kiln <args>` with `input` on stdin; stdout and stderr together.
  CmdResult kiln_stdin(const std::string& args, const std::string& input) const {
    write_file_atomic(p("stdin"), input);
    return testing::run_shell(testing::kiln_binary() + " " + args + " < '" + p("stdin").string() +
                              "' 2>&1");
  }
  Json json(const std::string& file) const { return read_json_file(p(file)); }

  // A directory holding the Llama-3-style test tokenizer as tokenizer.json (and nothing else).
  fs::path llama_tokenizer_dir() const {
    fs::create_directories(p("llama_tok"));
    fs::copy_file(kLlamaJson, p("llama_tok/tokenizer.json"), fs::copy_options::overwrite_existing);
    return p("llama_tok");
  }

  testing::TempDir tmp_{"kiln_chat_template_files"};
  const fs::path dir_ = tmp_.path();
};

// The README's own example: a Qwen3 model with Qwen3's tokenizer carries Qwen3's template (with
// thinking), so Qwen3 reasoning data renders with it.
TEST_F(ChatTemplateFiles, InitQwen3GetsQwen3Template) {
  const CmdResult r = kiln("init --config tiny-qwen3 --tokenizer " + kQwen3Dir.string() +
                           "/ --out " + p("m").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "chat template qwen3")) << r.out;
  EXPECT_EQ(json("m/tokenizer_config.json").at("chat_template").get<std::string>(),
            published("qwen3.jinja"));
  EXPECT_EQ(model_chat_template(p("m")).known, ChatTemplateId::kQwen3);
  EXPECT_EQ(json("m/config.json").at("bos_token_id"), 151643);
  EXPECT_EQ(json("m/config.json").at("eos_token_id"), 151645);
  const Json gen = json("m/generation_config.json");
  EXPECT_EQ(gen.at("eos_token_id"), Json({151645, 151643}));  // Qwen3's own list
  EXPECT_EQ(gen.at("bos_token_id"), 151643);
  EXPECT_EQ(gen.at("pad_token_id"), 151643);
  // A reasoning turn, which the Qwen2.5 template refuses, renders with the model's template.
  const CmdResult t = kiln_stdin(
      "tokenize --chat --tokenizer " + p("m").string(),
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "reasoning_content": "think"}]})");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_TRUE(has(t.out, "151667")) << t.out;  // <think>
}

// A Llama model with only a Llama 3 tokenizer.json: Llama 3.1's template, <|begin_of_text|> and
// <|eot_id|> in config.json, and Llama 3.1-Instruct's generation eos list, without a warning.
TEST_F(ChatTemplateFiles, InitLlamaGetsLlama31TemplateAndTokens) {
  const CmdResult r = kiln("init --config tiny-llama --tokenizer " +
                           llama_tokenizer_dir().string() + " --out " + p("m").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(has(r.out, "warn")) << r.out;
  const Json tc = json("m/tokenizer_config.json");
  EXPECT_EQ(tc.at("chat_template").get<std::string>(), published("llama3.1.jinja"));
  EXPECT_EQ(tc.at("bos_token"), "<|begin_of_text|>");
  EXPECT_EQ(tc.at("eos_token"), "<|eot_id|>");
  const Json config = json("m/config.json");
  EXPECT_EQ(config.at("bos_token_id"), 128000);
  EXPECT_EQ(config.at("eos_token_id"), 128009);
  const Json gen = json("m/generation_config.json");
  EXPECT_EQ(gen.at("bos_token_id"), 128000);
  EXPECT_EQ(gen.at("eos_token_id"), Json({128001, 128008, 128009}));
  EXPECT_FALSE(gen.contains("pad_token_id"));
}

// A tokenizer without the tokens a family's models use: one warning line naming them, and
// config.json without the ids.
TEST_F(ChatTemplateFiles, InitWarnsOfMissingSpecialTokens) {
  const CmdResult r = kiln("init --config tiny-llama --tokenizer " + kDemoDir.string() + " --out " +
                           p("m").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(count_lines_with(r.out, "warn"), 1u) << r.out;
  for (const char* t : {"<|begin_of_text|> (bos_token_id)", "<|eot_id|> (eos_token_id",
                        "<|eom_id|>", "<|end_of_text|>"}) {
    EXPECT_TRUE(has(r.out, t)) << t << " in " << r.out;
  }
  EXPECT_FALSE(json("m/config.json").contains("bos_token_id"));
  EXPECT_FALSE(json("m/config.json").contains("eos_token_id"));
}

// A tokenizer_config.json beside the tokenizer with a template: that one wins, byte for byte,
// with its eos; --template replaces it (the file's other fields kept).
TEST_F(ChatTemplateFiles, TokenizersOwnTemplateWinsUnlessTemplateIsGiven) {
  const fs::path tok = llama_tokenizer_dir();
  const std::string own =
      "{\"chat_template\": \"{{ messages }}\", \"eos_token\": \"<|eom_id|>\", \"x\": 1}\n";
  write_file_atomic(tok / "tokenizer_config.json", own);
  CmdResult r =
      kiln("init --config tiny-llama --tokenizer " + tok.string() + " --out " + p("m").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(read_file(p("m/tokenizer_config.json")), own);
  EXPECT_EQ(json("m/config.json").at("eos_token_id"), 128008);

  r = kiln("init --config tiny-llama --template llama3 --tokenizer " + tok.string() + " --out " +
           p("t").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const Json tc = json("t/tokenizer_config.json");
  EXPECT_EQ(tc.at("chat_template").get<std::string>(), published("llama3.1.jinja"));
  EXPECT_EQ(tc.at("x"), 1);
}

// --template on init: the named template whatever the family's; names from the one list.
TEST_F(ChatTemplateFiles, InitTemplateFlag) {
  CmdResult r = kiln("init --config tiny --template qwen3 --tokenizer " + kDemoDir.string() +
                     " --out " + p("m").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json("m/tokenizer_config.json").at("chat_template").get<std::string>(),
            published("qwen3.jinja"));
  // Without --template the tiny (Qwen2) preset gets Qwen2.5's.
  r = kiln("init --config tiny --tokenizer " + kDemoDir.string() + " --out " + p("q").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(model_chat_template(p("q")).known, ChatTemplateId::kQwen25);

  r = kiln("init --config tiny --template chatml --tokenizer " + kDemoDir.string() + " --out " +
           p("bad").string());
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(has(r.out, "qwen2.5")) << r.out;  // the choices
  r = kiln("init --config tiny --template qwen3 --out " + p("bad").string());
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.out,
            "kiln: error: --template needs --tokenizer (without one --out has no chat "
            "template)\n");
}

// --template on export, of a model directory and through --model: the directory's template
// replaced, and said so in one line.
TEST_F(ChatTemplateFiles, ExportTemplateFlag) {
  ASSERT_EQ(
      kiln("init --config tiny --tokenizer " + kDemoDir.string() + " --out " + p("m").string())
          .code,
      0);
  CmdResult r = kiln("export --checkpoint " + p("m").string() + " --out " + p("e").string() +
                     " --template qwen3");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "chat template qwen3 (--template) replaces the base's qwen2.5")) << r.out;
  EXPECT_EQ(json("e/tokenizer_config.json").at("chat_template").get<std::string>(),
            published("qwen3.jinja"));
  r = kiln("export --model " + p("m").string() + " --out " + p("e2").string() +
           " --template qwen3");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(model_chat_template(p("e2")).known, ChatTemplateId::kQwen3);
  // Without it, the model's own.
  ASSERT_EQ(kiln("export --checkpoint " + p("e").string() + " --out " + p("e3").string()).code, 0);
  EXPECT_EQ(read_file(p("e3/tokenizer_config.json")), read_file(p("e/tokenizer_config.json")));
}

}  // namespace
}  // namespace kiln
