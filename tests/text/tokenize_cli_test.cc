// End-to-end tests of `kiln tokenize` and `kiln detokenize`: the binary against the library and
// the reference ids, and one-line errors that name the stdin line.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <sstream>

#include "common/run_kiln.h"
#include "kiln/text/chat_template.h"
#include "text_test_util.h"

namespace kiln {
namespace {

// out: stdout, or stderr alone when asked for.
using testing::CmdResult;

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_temp_dir("kiln_tokenize_cli"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `kiln <args>` with `input` on stdin; returns its stdout, or its stderr alone.
  CmdResult kiln(const std::string& args, const std::string& input, bool stderr_only = false) {
    const fs::path in = dir_ / "stdin";
    write_file_atomic(in, input);
    const std::string cmd = std::string(KILN_BINARY_DIR) + "/bin/kiln " + args + " < '" +
                            in.string() + "'" + (stderr_only ? " 2>&1 >/dev/null" : " 2>/dev/null");
    return testing::run_shell(cmd);
  }

  static std::vector<std::string> lines(const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  }

  static void expect_one_line_error(const CmdResult& r, const std::string& needle) {
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_EQ(r.out.rfind("kiln: error: ", 0), 0u) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.out;
  }

  const std::string qwen3_ = "--tokenizer " + test::kQwen3Json.parent_path().string();
  fs::path dir_;
};

std::string ids_line(const std::vector<int32_t>& ids) { return Json(ids).dump(); }

TEST_F(TokenizeCli, PlainInputIsOneText) {
  const std::string text = "Hello, world!\n<|im_start|>user\nhi<|im_end|>\n\ttabs  and spaces  ";
  CmdResult r = kiln("tokenize " + qwen3_, text);
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(r.out, ids_line(test::qwen3().encode(text)) + "\n");
  r = kiln("tokenize --no-special " + qwen3_, text);
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(r.out, ids_line(test::qwen3().encode(text, false)) + "\n");
  r = kiln("tokenize " + qwen3_, "");
  EXPECT_EQ(r.out, "[]\n");
}

TEST_F(TokenizeCli, JsonlCorpusMatchesReference) {
  const std::string corpus = read_file(test::kFixtures / "corpus.jsonl");
  const std::vector<Json> expected = test::read_jsonl(test::kFixtures / "expected.jsonl");
  for (const bool no_special : {false, true}) {
    const CmdResult r = kiln(
        std::string("tokenize --jsonl ") + (no_special ? "--no-special " : "") + qwen3_, corpus);
    ASSERT_EQ(r.code, 0);
    const std::vector<std::string> got = lines(r.out);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], expected[i].at(no_special ? "ids_no_special" : "ids").dump())
          << "line " << i + 1;
    }
  }
  // Plain JSON strings work too; blank lines are skipped (Qwen's post-processor adds nothing).
  const CmdResult r =
      kiln("tokenize --jsonl " + qwen3_, "\"hello\"\n\n  \n{\"text\": \"hello\"}\n");
  EXPECT_EQ(r.out, "[14990]\n[14990]\n");
}

TEST_F(TokenizeCli, RoundTrip) {
  const std::string corpus = read_file(test::kFixtures / "corpus.jsonl");
  const CmdResult ids = kiln("tokenize --jsonl " + qwen3_, corpus);
  ASSERT_EQ(ids.code, 0);
  const std::vector<Json> expected = test::read_jsonl(test::kFixtures / "expected.jsonl");
  CmdResult r = kiln("detokenize --jsonl " + qwen3_, ids.out);
  ASSERT_EQ(r.code, 0);
  std::vector<std::string> got = lines(r.out);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(parse_json(got[i], "out").at("text"), expected[i].at("nfc")) << "line " << i + 1;
  }
  r = kiln("detokenize --jsonl --skip-special " + qwen3_, ids.out);
  got = lines(r.out);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(parse_json(got[i], "out").at("text"), expected[i].at("decoded_skip_special"))
        << "line " << i + 1;
  }
  r = kiln("detokenize " + qwen3_, "[9707, 11, 1879, 0]\n[151644, 872]\n");
  EXPECT_EQ(r.out, "Hello, world!\n<|im_start|>user\n");
}

TEST_F(TokenizeCli, Chat) {
  const std::string line =
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x<|im_end|>"}], "add_generation_prompt": true})";
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "x<|im_end|>"}};
  // No tokenizer_config.json beside the tokenizer: qwen2.5, kiln's default.
  const ChatTemplate& qwen25 = chat_template(ChatTemplateId::kQwen25);
  const ChatOptions gen{.add_generation_prompt = true};
  CmdResult r = kiln("tokenize --chat " + qwen3_, line + "\n" + line);
  ASSERT_EQ(r.code, 0);
  const std::string want = ids_line(encode_chat(test::qwen3(), qwen25, msgs, {}, gen, true));
  EXPECT_EQ(r.out, want + "\n" + want + "\n");
  r = kiln("tokenize --chat --no-special " + qwen3_, line);
  EXPECT_EQ(r.out, ids_line(encode_chat(test::qwen3(), qwen25, msgs, {}, gen, false)) + "\n");
  r = kiln("tokenize --chat " + qwen3_, R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(r.out,
            ids_line(test::qwen3().encode(render_chat(qwen25, {{"user", "hi"}}, {}, {}))) + "\n");
  // --template and --enable-thinking (a line's own enable_thinking wins).
  const ChatTemplate& qwen3 = chat_template(ChatTemplateId::kQwen3);
  const std::string hi =
      R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})";
  r = kiln("tokenize --chat --template qwen3 --enable-thinking false " + qwen3_, hi);
  EXPECT_EQ(r.out,
            ids_line(encode_chat(test::qwen3(), qwen3, {{"user", "hi"}}, {},
                                 {.add_generation_prompt = true, .enable_thinking = false})) +
                "\n");
  EXPECT_EQ(r.out.find("151667,271,151668,271]"), r.out.size() - 23)
      << r.out;  // <think>\n\n</think>\n\n
}

TEST_F(TokenizeCli, AddSpecialTokens) {
  const std::string llama = "--tokenizer " + test::kTinyLlama3Json.string();
  EXPECT_EQ(kiln("tokenize " + llama, "hello world").out, "[260,264]\n");
  EXPECT_EQ(kiln("tokenize --add-special-tokens " + llama, "hello world").out,
            "[128000,260,264]\n");
  EXPECT_EQ(kiln("tokenize --jsonl --add-special-tokens " + llama, "\"hello\"\n\" wow\"\n").out,
            "[128000,260]\n[128000,272]\n");
}

// A {"text": ...} record of --jsonl is encoded as training and HF's tokenizer(text) encode it:
// the post-processor's tokens (Llama 3's <|begin_of_text|> first; none for Qwen), a plain string
// as the text alone.
TEST_F(TokenizeCli, JsonlTextRecordsGetThePostProcessorsTokens) {
  const std::string llama = "--tokenizer " + test::kTinyLlama3Json.string();
  const std::vector<std::string> texts = {"hello world", " wow <|eot_id|>"};
  for (const auto& [args, tok] :
       {std::pair{llama, &test::tiny_llama3()}, std::pair{qwen3_, &test::qwen3()}}) {
    std::string input, want;
    for (const std::string& t : texts) {
      input += Json{{"text", t}}.dump() + "\n";
      want += ids_line(tok->encode_with_special_tokens(t)) + "\n";
    }
    const CmdResult r = kiln("tokenize --jsonl " + args, input);
    ASSERT_EQ(r.code, 0) << args;
    EXPECT_EQ(r.out, want) << args;
    EXPECT_EQ(kiln("tokenize --jsonl " + args, "\"hello world\"\n").out,
              ids_line(tok->encode("hello world")) + "\n");
  }
  EXPECT_EQ(kiln("tokenize --jsonl " + llama, "{\"text\": \"hello world\"}\n").out,
            "[128000,260,264]\n");
}

// Every case of the published templates' renderings (tests/fixtures/data, tools/
// chat_template_ref.py), through the CLI: the ids of the reference's rendered string.
TEST_F(TokenizeCli, ChatMatchesTheReferenceTemplates) {
  const std::string llama = "--tokenizer " + test::kTinyLlama3Json.string();
  const std::tuple<const char*, std::string, const Tokenizer*> cases[] = {
      {"chat_template_ref.jsonl", qwen3_, &test::qwen3()},
      {"chat_template_qwen3.jsonl", "--template qwen3 " + qwen3_, &test::qwen3()},
      {"chat_template_llama3.jsonl", "--template llama3 " + llama, &test::tiny_llama3()}};
  for (const auto& [file, args, tok] : cases) {
    SCOPED_TRACE(file);
    const std::string fixture = read_file(fs::path(KILN_SOURCE_DIR) / "tests/fixtures/data" / file);
    CmdResult r = kiln("tokenize --chat " + args, fixture);
    ASSERT_EQ(r.code, 0) << r.out;
    std::istringstream in(fixture);
    std::string want;
    int tools = 0;
    for (std::string line; std::getline(in, line);) {
      const Json j = parse_json(line, "fixture");
      tools += j.contains("tools");
      want += ids_line(tok->encode(j.at("rendered").get<std::string>(), true)) + "\n";
    }
    EXPECT_GT(tools, 3);
    EXPECT_EQ(r.out, want);
  }
  expect_one_line_error(
      kiln("tokenize --chat " + qwen3_,
           R"({"messages": [{"role": "tool", "content": "r", "extra": 1}]})", true),
      "stdin:1: messages[0].extra is not supported (kiln's chat templates render role, "
      "content, name, tool_call_id)");
}

TEST_F(TokenizeCli, ChatTemplateErrors) {
  // A template kiln does not know, beside the tokenizer: one line naming the file and --template.
  fs::copy_file(test::kTinyLlama3Json, dir_ / "tokenizer.json");
  write_file_atomic(dir_ / "tokenizer_config.json", R"({"chat_template": "{{ messages }}"})");
  const std::string unknown = "--tokenizer " + dir_.string();
  const std::string hi = R"({"messages": [{"role": "user", "content": "hi"}]})";
  expect_one_line_error(kiln("tokenize --chat " + unknown, hi, true),
                        (dir_ / "tokenizer_config.json").string() +
                            ": its chat template is not one kiln knows; set --template to the "
                            "one it renders (qwen2.5, qwen3 or llama3)");
  EXPECT_EQ(kiln("tokenize --chat --template llama3 " + unknown, hi).code, 0);
  expect_one_line_error(
      kiln("tokenize --chat --template llama3 --enable-thinking true " + unknown, hi, true),
      "--enable-thinking: the llama3 chat template has no thinking mode");
  expect_one_line_error(kiln("tokenize --chat --template llama3 " + unknown,
                             R"({"messages": [], "enable_thinking": false})", true),
                        "stdin:1: enable_thinking: the llama3 chat template has no thinking mode");
}

TEST_F(TokenizeCli, ErrorsNameTheLine) {
  expect_one_line_error(kiln("tokenize --jsonl " + qwen3_, "\"ok\"\n{bad\n", true),
                        "stdin:2: malformed JSON");
  expect_one_line_error(kiln("tokenize --jsonl " + qwen3_, "\"ok\"\n\n[1]\n", true),
                        "stdin:3: expected a JSON string or an object with a \"text\" string");
  expect_one_line_error(
      kiln("tokenize --chat " + qwen3_, R"({"messages": [{"role": "bot", "content": ""}]})", true),
      "stdin:1: messages[0].role is 'bot', expected system, user, assistant or tool");
  expect_one_line_error(kiln("tokenize --chat " + qwen3_, "{}", true),
                        "stdin:1: \"messages\" is missing");
  expect_one_line_error(kiln("tokenize " + qwen3_, "caf\xC3", true),
                        "stdin: text is not valid UTF-8 (byte 3 of 4)");
  expect_one_line_error(kiln("detokenize " + qwen3_, "[1]\n[1, \"x\"]\n", true),
                        "stdin:2: expected a JSON array of token ids, found \"x\"");
  expect_one_line_error(kiln("detokenize " + qwen3_, "[151669]\n", true),
                        "stdin:1: decode: id 151669 is not in the vocabulary");
  expect_one_line_error(kiln("tokenize --tokenizer " + dir_.string(), "x", true),
                        "no tokenizer.json in this directory");
  // The lines before the bad one were written.
  EXPECT_EQ(kiln("tokenize --jsonl " + qwen3_, "\"hello\"\n{bad\n").out, "[14990]\n");
}

TEST_F(TokenizeCli, Help) {
  for (const char* sub : {"tokenize", "detokenize"}) {
    const CmdResult r = kiln(std::string(sub) + " --help", "");
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_NE(r.out.find("--tokenizer"), std::string::npos) << sub;
  }
  EXPECT_NE(kiln("tokenize --jsonl --chat " + qwen3_, "", true).code, 0);
}

}  // namespace
}  // namespace kiln
