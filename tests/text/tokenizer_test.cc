// The tokenizer against reference ids from an independent implementation (transformers.js via
// tools/tokenizer_ref/gen.mjs) over a corpus of prose, code, many scripts, emoji, whitespace
// runs and literal special tokens; and the public API around it.
#include <gtest/gtest.h>

#include <thread>

#include "kiln/base/error.h"
#include "text_test_util.h"

namespace kiln {
namespace {

using test::ids_of;

void expect_matches_reference(const Tokenizer& tok, const fs::path& expected_path) {
  const std::vector<std::string> texts = test::corpus();
  const std::vector<Json> expected = test::read_jsonl(expected_path);
  ASSERT_EQ(texts.size(), expected.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE("corpus line " + std::to_string(i + 1));
    const Json& e = expected[i];
    const std::vector<int32_t> ids = tok.encode(texts[i]);
    EXPECT_EQ(ids, ids_of(e.at("ids")));
    EXPECT_EQ(tok.encode(texts[i], /*parse_special=*/false), ids_of(e.at("ids_no_special")));
    // decode(encode(x)) == NFC(x), NFC as computed by JavaScript's String.normalize.
    EXPECT_EQ(tok.decode(ids), e.at("nfc").get<std::string>());
    EXPECT_EQ(tok.decode(ids, /*skip_special=*/true),
              e.at("decoded_skip_special").get<std::string>());
  }
}

TEST(Tokenizer, Qwen3MatchesReference) {
  expect_matches_reference(test::qwen3(), test::kFixtures / "expected.jsonl");
}

TEST(Tokenizer, TinyMatchesReference) {
  expect_matches_reference(test::tiny(), test::kFixtures / "tiny_expected.jsonl");
}

TEST(Tokenizer, Qwen3Vocabulary) {
  const Tokenizer& t = test::qwen3();
  EXPECT_EQ(t.vocab_size(), 151669);
  EXPECT_EQ(t.token_id("<|endoftext|>"), 151643);
  EXPECT_EQ(t.token_id("<|im_start|>"), 151644);
  EXPECT_EQ(t.token_id("<|im_end|>"), 151645);
  EXPECT_EQ(t.token_id("<think>"), 151667);
  EXPECT_EQ(t.token_id("\xC4\xA0the"), 279);  // "Ġthe"
  EXPECT_EQ(t.token_id("no such token"), -1);
  EXPECT_EQ(t.token_str(279), "\xC4\xA0the");
  EXPECT_EQ(t.token_str(151645), "<|im_end|>");
  EXPECT_EQ(t.token_str(151669), std::nullopt);
  EXPECT_EQ(t.token_str(-1), std::nullopt);
  EXPECT_TRUE(t.is_special(151645));
  EXPECT_FALSE(t.is_special(151667));  // <think> is added but not special
  EXPECT_TRUE(t.is_added(151667));
  EXPECT_FALSE(t.is_special(279));
  EXPECT_FALSE(t.is_added(279));
  EXPECT_FALSE(t.is_special(1 << 30));
  EXPECT_EQ(t.source(), test::kQwen3Json.string());
}

TEST(Tokenizer, SpecialTokensBothWays) {
  const Tokenizer& t = test::qwen3();
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  const std::vector<int32_t> parsed = t.encode(text);
  ASSERT_EQ(parsed.size(), 5u);  // <|im_start|> user \n hi <|im_end|>
  EXPECT_EQ(parsed.front(), 151644);
  EXPECT_EQ(parsed.back(), 151645);
  const std::vector<int32_t> plain = t.encode(text, false);
  for (const int32_t id : plain) EXPECT_FALSE(t.is_added(id)) << id;
  EXPECT_EQ(t.decode(plain), text);
  EXPECT_EQ(t.decode(parsed), text);
  EXPECT_EQ(t.decode(parsed, /*skip_special=*/true), "user\nhi");
  // Non-special added tokens still match without parse_special, as in Hugging Face.
  EXPECT_EQ(t.encode("<think>", false), std::vector<int32_t>{151667});
}

TEST(Tokenizer, DecodeRepairsSplitCharacters) {
  const Tokenizer& t = test::qwen3();
  const std::vector<int32_t> ids = t.encode("\xE4\xBD\xA0\xE5\xA5\xBD");  // 你好
  ASSERT_FALSE(ids.empty());
  std::string all;
  for (const int32_t id : ids) all += t.decode(std::vector<int32_t>{id});
  EXPECT_EQ(t.decode(ids), "\xE4\xBD\xA0\xE5\xA5\xBD");
  // Byte tokens that split a character decode to U+FFFD, one per maximal ill-formed subpart.
  const int32_t e4 = t.token_id("\xC3\xA4");  // byte 0xE4 spelled as 'ä'
  ASSERT_GE(e4, 0);
  EXPECT_EQ(t.decode(std::vector<int32_t>{e4}), "\xEF\xBF\xBD");
  EXPECT_EQ(t.decode(std::vector<int32_t>{e4, t.token_id("a")}),
            "\xEF\xBF\xBD"
            "a");
}

TEST(Tokenizer, Errors) {
  const Tokenizer& t = test::qwen3();
  EXPECT_THROW(t.encode("bad \xFF byte"), Error);
  EXPECT_THROW(t.encode("\xED\xA0\x80"), Error);  // a surrogate
  EXPECT_THROW(t.decode(std::vector<int32_t>{151669}), Error);
  EXPECT_THROW(t.decode(std::vector<int32_t>{-1}), Error);
  try {
    t.encode("abc\xC3");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "text is not valid UTF-8 (byte 3 of 4)");
  }
}

TEST(Tokenizer, EmptyAndAppend) {
  const Tokenizer& t = test::qwen3();
  EXPECT_TRUE(t.encode("").empty());
  EXPECT_EQ(t.decode(std::vector<int32_t>{}), "");
  std::vector<int32_t> ids = {7};
  t.encode("hello", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{7, 14990}));
}

TEST(Tokenizer, ConcurrentEncodeAgrees) {
  const Tokenizer& t = test::qwen3();
  const std::vector<std::string> texts = test::corpus();
  std::vector<std::vector<int32_t>> want;
  for (const auto& s : texts) want.push_back(t.encode(s));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(8, 0);
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 3; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t j = (i * 7 + k) % texts.size();  // each thread in its own order
          if (t.encode(texts[j]) != want[j]) ++mismatches[k];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 8; ++k) EXPECT_EQ(mismatches[k], 0) << "thread " << k;
}

TEST(Tokenizer, CopiesShareTheModel) {
  const Tokenizer a = test::tiny();
  const Tokenizer b = a;
  EXPECT_EQ(a.encode("hello world"), b.encode("hello world"));
  // Two tokenizers on one thread must not see each other's cached pieces.
  EXPECT_NE(test::qwen3().encode("hello world"), a.encode("hello world"));
  EXPECT_EQ(test::qwen3().encode("hello world"), (std::vector<int32_t>{14990, 1879}));
}

}  // namespace
}  // namespace kiln
