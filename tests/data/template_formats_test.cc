// The data formats with each chat template and a Llama 3 tokenizer: loss masks (the assistant's
// rendered turn, think block included, and nothing else), the post-processor's
// <|begin_of_text|> where Hugging Face's tokenizer(text) adds it and never twice, and which
// template load_dataset chooses.
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "data_test_util.h"
#include "kiln/base/error.h"
#include "kiln/base/ignore_index.h"
#include "kiln/data/formats.h"
#include "kiln/data/text_dataset.h"
#include "kiln/text/chat_template.h"

namespace kiln {
namespace {

using Ids = std::vector<int32_t>;
constexpr int32_t X = kIgnoreIndex;
const fs::path kLlamaTokenizer =
    fs::path(KILN_SOURCE_DIR) / "tests/fixtures/tokenizer/llama3_tiny_tokenizer.json";

const Tokenizer& llama_tok() {
  static const Tokenizer t = Tokenizer::load(kLlamaTokenizer);
  return t;
}

LineEncoder llama_encoder(DataFormat f, bool train_on_prompt = false) {
  return LineEncoder(f, &llama_tok(), llama_tok().vocab_size(), train_on_prompt,
                     &chat_template(ChatTemplateId::kLlama3));
}

// The first example's ids.
Ids first_ids(const TokenizedDataset& d) {
  const std::span<const int32_t> ids = d.example(0).input_ids;
  return Ids(ids.begin(), ids.end());
}

// The ids with loss, in order.
Ids learnt(const Example& ex) {
  Ids out;
  for (const int32_t l : ex.labels) {
    if (l != X) out.push_back(l);
  }
  return out;
}

TEST(TemplateFormats, Llama3ChatLearnsTheRepliesAndHasOneBeginOfText) {
  const std::string line =
      R"({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello world"},
                        {"role": "user", "content": "IT'S"}, {"role": "assistant", "content": " wow "}]})";
  const Example ex = llama_encoder(DataFormat::kChat).encode(line, "t:1");
  // Each reply (trimmed) and its <|eot_id|>: hello 260, " world" 264; " wow" is 272 but the
  // template trims it to "wow" (86 78 86).
  EXPECT_EQ(learnt(ex), (Ids{260, 264, 128009, 86, 78, 86, 128009}));
  EXPECT_EQ(ex.input_ids[0], 128000);
  EXPECT_EQ(std::count(ex.input_ids.begin(), ex.input_ids.end(), 128000), 1);
  EXPECT_EQ(llama_tok().decode(ex.input_ids), render_chat(chat_template(ChatTemplateId::kLlama3),
                                                          {{"user", "hello"},
                                                           {"assistant", "hello world"},
                                                           {"user", "IT'S"},
                                                           {"assistant", " wow "}},
                                                          {}, {}));
  // train_on_prompt: everything, the template's <|begin_of_text|> included.
  const Example all = llama_encoder(DataFormat::kChat, true).encode(line, "t:1");
  EXPECT_EQ(all.labels, all.input_ids);
}

TEST(TemplateFormats, TextAndCompletionGetThePostProcessorTokens) {
  const Example text = llama_encoder(DataFormat::kText).encode(R"({"text": "hello world"})", "t:1");
  EXPECT_EQ(text.input_ids, (Ids{128000, 260, 264, 128001}));  // <|end_of_text|> last
  EXPECT_EQ(text.labels, text.input_ids);
  const Example c = llama_encoder(DataFormat::kCompletion)
                        .encode(R"({"prompt": "12345", "completion": " wow"})", "t:1");
  EXPECT_EQ(c.input_ids, (Ids{128000, 266, 19, 20, 272, 128001}));
  EXPECT_EQ(c.labels, (Ids{X, X, X, X, 272, 128001}));
  // Qwen's post-processor adds nothing: as before.
  const LineEncoder qwen(DataFormat::kText, &test::qwen(), test::kVocab, false);
  EXPECT_EQ(qwen.encode(R"({"text": "hello"})", "t:1").input_ids,
            (Ids{test::qwen().encode("hello")[0], test::kEndOfText}));
}

TEST(TemplateFormats, Qwen3LearnsTheThinkBlockUnlessThinkingIsOff) {
  const std::string line =
      R"({"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]})";
  const ChatTemplate& qwen3 = chat_template(ChatTemplateId::kQwen3);
  const Tokenizer& tok = test::qwen();
  const Ids think = tok.encode("<think>\n\n</think>\n\n");
  const Ids answer = tok.encode("4");
  const Ids end = {test::kImEnd};
  const auto concat = [](std::initializer_list<Ids> parts) {
    Ids out;
    for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  const Example on =
      LineEncoder(DataFormat::kChat, &tok, test::kVocab, false, &qwen3).encode(line, "t:1");
  EXPECT_EQ(learnt(on), concat({think, answer, end}));
  const Example off =
      LineEncoder(DataFormat::kChat, &tok, test::kVocab, false, &qwen3, {.enable_thinking = false})
          .encode(line, "t:1");
  EXPECT_EQ(learnt(off), concat({answer, end}));
  EXPECT_EQ(off.input_ids, on.input_ids);  // the same text, the same tokens
}

// load_dataset's choice: the template beside the tokenizer when kiln knows it, data.template
// otherwise; each in the cache key.
TEST(TemplateFormats, LoadDatasetChoosesAndKeysTheTemplate) {
  const test::TempDir dir("template_choice");
  fs::copy_file(kLlamaTokenizer, dir / "tokenizer.json");
  write_file_atomic(
      dir / "chat.jsonl",
      R"({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello"}]})"
      "\n");
  DataOptions o;
  o.path = dir / "chat.jsonl";
  o.format = DataFormat::kChat;
  o.tokenizer = dir.path();
  o.use_cache = false;
  o.verbose = false;
  const int64_t vocab = llama_tok().vocab_size();
  const auto error = [&](const DataOptions& opts) -> std::string {
    return testing::error_of([&] { load_dataset(opts, vocab); });
  };
  // No tokenizer_config.json: qwen2.5, which this tokenizer cannot render.
  EXPECT_NE(error(o).find("no <|im_start|> token, which the qwen2.5 chat template needs"),
            std::string::npos)
      << error(o);
  // The published Llama 3.2 template beside it: llama3.
  write_file_atomic(dir / "tokenizer_config.json",
                    Json{{"chat_template", read_file(fs::path(KILN_SOURCE_DIR) /
                                                     "assets/chat_templates/llama3.2.jinja")}}
                        .dump());
  EXPECT_EQ(data_chat_template(o)->name(), "llama3");
  const TokenizedDataset d = load_dataset(o, vocab);
  EXPECT_EQ(d.example(0).input_ids[0], 128000);
  const uint64_t llama_key = data_cache_key(o);
  // A template kiln does not know: an error naming data.template, until it is set.
  write_file_atomic(dir / "tokenizer_config.json", R"({"chat_template": "{{ messages }}"})");
  EXPECT_EQ(error(o), (dir / "tokenizer_config.json").string() +
                          ": its chat template is not one kiln knows; set data.template to the "
                          "one it renders (qwen2.5, qwen3 or llama3)");
  o.chat_template = "llama3";
  EXPECT_EQ(first_ids(load_dataset(o, vocab)), first_ids(d));
  EXPECT_EQ(data_cache_key(o), llama_key);  // the same template, the same tokens
  o.enable_thinking = false;
  EXPECT_EQ(error(o), "data.enable_thinking: the llama3 chat template has no thinking mode");
  // The key follows the template and the thinking switch.
  DataOptions q = o;
  q.chat_template = "qwen3";
  const uint64_t off = data_cache_key(q);
  q.enable_thinking = true;
  EXPECT_NE(data_cache_key(q), off);
  EXPECT_NE(data_cache_key(q), llama_key);
  // Formats that are not a chat need no template at all.
  write_file_atomic(dir / "text.jsonl", R"({"text": "hello"})"
                                        "\n");
  DataOptions t = o;
  t.path = dir / "text.jsonl";
  t.format = DataFormat::kText;
  t.chat_template.clear();
  t.enable_thinking.reset();
  EXPECT_EQ(data_chat_template(t), nullptr);
  EXPECT_EQ(first_ids(load_dataset(t, vocab)), (Ids{128000, 260, 128001}));
}

}  // namespace
}  // namespace kiln
