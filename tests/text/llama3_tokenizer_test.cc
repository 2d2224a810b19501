// A tokenizer.json laid out as Llama 3's (tests/fixtures/tokenizer/llama3_tiny_tokenizer.json,
// tools/make_llama3_test_tokenizer.py): its Split regex, ignore_merges and the TemplateProcessing
// post-processor that adds <|begin_of_text|>.
//
// The expected ids are derived by hand from the script's lists, as Hugging Face tokenizers
// encodes: byte symbols have GPT-2's ids (printable ASCII b -> b - 33: 'h' 71, 'e' 68, 'i' 72,
// 'a' 64, 'b' 65, 'I' 40, 'T' 51, 'S' 50, '\'' 6, '1' 16 .. '5' 20, 'w' 86, 'o' 78; space "Ġ"
// 220, newline "Ċ" 198); merges give 256.. in rank order (hello 260, Ġworld 264, 123 266, ĊĊ 267,
// user 270, 'S 271); "Ġwow" is 272 and no merge leads to it; added tokens are 128000..128255.
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "text_test_util.h"

namespace kiln {
namespace {

using Ids = std::vector<int32_t>;

const Tokenizer& llama() { return test::tiny_llama3(); }

TEST(Llama3Tokenizer, Layout) {
  EXPECT_EQ(llama().vocab_size(), 128256);
  EXPECT_EQ(llama().token_id("<|begin_of_text|>"), 128000);
  EXPECT_EQ(llama().token_id("<|end_of_text|>"), 128001);
  EXPECT_EQ(llama().token_id("<|start_header_id|>"), 128006);
  EXPECT_EQ(llama().token_id("<|eot_id|>"), 128009);
  EXPECT_EQ(llama().token_id("<|reserved_special_token_247|>"), 128255);
  EXPECT_TRUE(llama().is_special(128009));
  EXPECT_FALSE(llama().token_str(300).has_value());  // between the vocabulary and the added ids
}

TEST(Llama3Tokenizer, SplitRegexAndMerges) {
  // "hello" and " world" are pre-tokens found whole in the vocabulary.
  EXPECT_EQ(llama().encode("hello world"), (Ids{260, 264}));
  // \p{N}{1,3}: "123" | "45" (Qwen's \p{N} would give five pieces: 16 17 18 19 20).
  EXPECT_EQ(llama().encode("12345"), (Ids{266, 19, 20}));
  // (?i:'s|...): "'S" is one pre-token, merged by "' S"; a case-sensitive 's would leave "'"
  // and "S" apart (6, 50).
  EXPECT_EQ(llama().encode("IT'S"), (Ids{40, 51, 271}));
  // \s*[\r\n]+: the two newlines are one pre-token, merged by "Ċ Ċ".
  EXPECT_EQ(llama().encode("a\n\nb"), (Ids{64, 267, 65}));
}

TEST(Llama3Tokenizer, IgnoreMergesTakesWholeWords) {
  // " wow" is in the vocabulary though no merge builds it; without ignore_merges BPE would stop
  // at "Ġw" "o" "w" (256 78 86).
  EXPECT_EQ(llama().encode(" wow"), (Ids{272}));
}

TEST(Llama3Tokenizer, PostProcessorAddsBeginOfText) {
  ASSERT_EQ(llama().special_prefix().size(), 1u);
  EXPECT_EQ(llama().special_prefix()[0], 128000);
  EXPECT_TRUE(llama().special_suffix().empty());
  EXPECT_EQ(llama().encode_with_special_tokens("hello world"), (Ids{128000, 260, 264}));
  EXPECT_EQ(llama().encode_with_special_tokens(""), (Ids{128000}));
  // As HF's tokenizer(text): a <|begin_of_text|> in the text is a second one.
  EXPECT_EQ(llama().encode_with_special_tokens("<|begin_of_text|>hi"),
            (Ids{128000, 128000, 71, 72}));
  // The Qwen tokenizers' post-processor (ByteLevel) adds nothing.
  EXPECT_EQ(test::qwen3().encode_with_special_tokens("hello world"),
            test::qwen3().encode("hello world"));
  EXPECT_TRUE(test::qwen3().special_prefix().empty());
}

TEST(Llama3Tokenizer, SpecialTokensAndDecoding) {
  EXPECT_EQ(llama().encode("<|start_header_id|>user<|end_header_id|>\n\n"),
            (Ids{128006, 270, 128007, 267}));
  EXPECT_EQ(llama().decode(Ids{128000, 260, 264, 128009}),
            "<|begin_of_text|>hello world<|eot_id|>");
  EXPECT_EQ(llama().decode(Ids{128000, 260, 264, 128009}, true), "hello world");
}

// Post-processors kiln does not take are refused with the field named.
TEST(Llama3Tokenizer, PostProcessorErrors) {
  const Json base = parse_json(read_file(test::kTinyLlama3Json), "tiny");
  const auto error = [&](auto&& edit) -> std::string {
    Json j = base;
    edit(j["post_processor"]);
    return testing::error_of([&] { Tokenizer::from_json_text(j.dump(), "t.json"); });
  };
  EXPECT_EQ(error([](Json& p) {
              p = {{"type", "RobertaProcessing"}};
            }),
            "t.json: post_processor.type is 'RobertaProcessing'; only ByteLevel and "
            "TemplateProcessing are supported");
  EXPECT_EQ(error([](Json& p) { p["processors"][1]["single"][0]["SpecialToken"]["id"] = "<s>"; }),
            "t.json: post_processor.processors[1].single[0]: \"<s>\" is not in "
            "post_processor.processors[1].special_tokens");
  EXPECT_EQ(error([](Json& p) {
              p["processors"][1]["special_tokens"]["<|begin_of_text|>"]["ids"][0] = 300;
            }),
            "t.json: post_processor.processors[1].special_tokens[\"<|begin_of_text|>\"].ids[0] "
            "is 300, which is not in the vocabulary");
  EXPECT_EQ(error([](Json& p) { p["processors"][1]["single"].erase(1); }),
            "t.json: post_processor.processors[1].single has no Sequence 'A'");
  EXPECT_EQ(error([](Json& p) { p["processors"][1]["single"][1]["Sequence"]["id"] = "B"; }),
            "t.json: post_processor.processors[1].single[1].Sequence.id is 'B', expected 'A'");
  EXPECT_EQ(error([](Json& p) { p["processors"].push_back(p["processors"][1]); }),
            "t.json: post_processor.processors[2] is a second TemplateProcessing");
  // A suffix after $A, and a post-processor that is the TemplateProcessing itself.
  Json j = base;
  j["post_processor"] = base["post_processor"]["processors"][1];
  j["post_processor"]["single"].push_back({{"SpecialToken", {{"id", "<|begin_of_text|>"}}}});
  const Tokenizer t = Tokenizer::from_json_text(j.dump(), "t.json");
  EXPECT_EQ(t.encode_with_special_tokens("hello"), (Ids{128000, 260, 128000}));
}

}  // namespace
}  // namespace kiln
