// The tokenizer's parts on their own: UTF-8 helpers, the byte-level alphabet, NFC by stretches
// against utf8proc on the whole string, Split behaviours, added-token flags, and the heap BPE
// against a naive quadratic one.
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <random>

#include "kiln/text/added_vocab.h"
#include "kiln/text/bpe.h"
#include "kiln/text/byte_level.h"
#include "kiln/text/normalizer.h"
#include "kiln/text/pre_tokenizer.h"
#include "kiln/text/utf8.h"
#include "text_test_util.h"

namespace kiln::text {
namespace {

TEST(Utf8, FindInvalid) {
  EXPECT_EQ(find_invalid_utf8("plain ascii text, long enough for the 8-byte skip"),
            std::string::npos);
  EXPECT_EQ(find_invalid_utf8("\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x91\x8D"), std::string::npos);
  EXPECT_EQ(find_invalid_utf8("ab\x80"), 2u);            // stray continuation
  EXPECT_EQ(find_invalid_utf8("\xC0\xAF"), 0u);          // overlong
  EXPECT_EQ(find_invalid_utf8("a\xED\xA0\x80"), 1u);     // surrogate
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(find_invalid_utf8("12345678\xE4\xBD"), 8u);  // truncated
}

TEST(Utf8, LossyRepair) {
  // One U+FFFD per maximal subpart, as WHATWG / Rust from_utf8_lossy.
  EXPECT_EQ(to_valid_utf8("a\xF0\x9F\x91"
                          "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(to_valid_utf8("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(to_valid_utf8("\xE0\x80\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(to_valid_utf8("\xE4\xBD\xA0"), "\xE4\xBD\xA0");
}

TEST(ByteLevel, Alphabet) {
  EXPECT_EQ(byte_to_code_point(' '), 0x120u);   // Ġ
  EXPECT_EQ(byte_to_code_point('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(byte_to_code_point('A'), 0x41u);
  EXPECT_EQ(byte_to_code_point(0xAD), 0x143u);  // soft hyphen is not printable
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(code_point_to_byte(byte_to_code_point(static_cast<uint8_t>(b))), b);
  }
  std::string all, back;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string spelled;
  append_byte_level(spelled, all);
  ASSERT_TRUE(decode_byte_level(spelled, back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(decode_byte_level("\xE4\xBD\xA0", back));  // 你 is not in the alphabet
}

std::string utf8proc_nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &out,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

TEST(Normalizer, StretchesAgreeWithWholeString) {
  // Pieces chosen to straddle the stretch boundaries: bases, combining marks in and out of
  // canonical order, precomposed letters, singletons, Hangul jamo and syllables, CJK.
  const std::vector<std::string> parts = {"a",
                                          "e",
                                          " ",
                                          "\n",
                                          "Z",
                                          "\xCC\x81",
                                          "\xCC\x80",
                                          "\xCC\xA3",
                                          "\xCD\x85",
                                          "\xC3\xA9",
                                          "\xE1\xBB\x87",
                                          "\xE2\x84\xAB",
                                          "\xE1\x84\x80",
                                          "\xE1\x85\xA1",
                                          "\xE1\x86\xA8",
                                          "\xEA\xB0\x80",
                                          "\xE4\xBD\xA0",
                                          "\xF0\x9F\x91\x8D",
                                          "\xE0\xA4\xBC",
                                          "\xE3\x82\x99",
                                          "\xE3\x81\x8B",
                                          "\xCD\x84",
                                          "\xEF\xAC\x81"};
  std::mt19937 rng(3);
  for (int round = 0; round < 3000; ++round) {
    std::string s;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 12); k < n; ++k)
      s += parts[rng() % parts.size()];
    ASSERT_EQ(nfc(s), utf8proc_nfc(s)) << "round " << round;
  }
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo -> 각
  EXPECT_EQ(nfc("plain"), "plain");
}

TEST(Normalizer, AgreesWithJavaScript) {
  const std::vector<std::string> texts = test::corpus();
  const std::vector<Json> expected = test::read_jsonl(test::kFixtures / "expected.jsonl");
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(nfc(texts[i]), expected[i].at("nfc").get<std::string>()) << "line " << i + 1;
  }
}

std::vector<std::string> split(std::string_view pattern, SplitBehavior b, bool invert,
                               std::string_view text) {
  PreTokenizer p;
  p.add_split(Regex(pattern, true, "test"), b, invert);
  std::vector<Span> spans;
  p.split(text, spans);
  std::vector<std::string> out;
  for (const auto& [x, y] : spans) out.emplace_back(text.substr(x, y - x));
  return out;
}

TEST(PreTokenizer, SplitBehaviours) {
  // The examples of Hugging Face's SplitDelimiterBehavior.
  using V = std::vector<std::string>;
  const std::string_view s = "the-final--countdown";
  EXPECT_EQ(split("-", SplitBehavior::kRemoved, false, s), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split("-", SplitBehavior::kIsolated, false, s),
            (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split("-", SplitBehavior::kMergedWithPrevious, false, s),
            (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split("-", SplitBehavior::kMergedWithNext, false, s),
            (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split("-", SplitBehavior::kContiguous, false, s),
            (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(split("-", SplitBehavior::kRemoved, true, s), (V{"-", "-", "-"}));
  EXPECT_EQ(split("-", SplitBehavior::kIsolated, false, ""), V{});
}

TEST(PreTokenizer, EmptyMatchesAdvance) {
  PreTokenizer p;
  p.add_split(Regex("x*", false, "test"), SplitBehavior::kIsolated, false);
  std::vector<Span> spans;
  p.split("ab\xC3\xA9xxc", spans);
  EXPECT_EQ(spans, (std::vector<Span>{{0, 4}, {4, 6}, {6, 7}}));
}

AddedToken token(int32_t id, std::string content, bool special = true) {
  AddedToken t;
  t.id = id;
  t.content = std::move(content);
  t.special = special;
  return t;
}

std::vector<AddedMatch> find(const std::vector<AddedToken>& toks, std::string_view text,
                             bool parse_special = true) {
  std::vector<std::string> patterns;
  for (const auto& t : toks) patterns.push_back(t.content);
  AddedMatcher m(toks, patterns);
  std::vector<AddedMatch> out;
  m.find(text, parse_special, out);
  return out;
}

TEST(AddedTokens, LeftmostLongest) {
  const std::vector<AddedToken> toks = {token(1, "<a>"), token(2, "<a><b>"), token(3, "b>")};
  EXPECT_EQ(find(toks, "x<a><b>y<a>"), (std::vector<AddedMatch>{{1, 7, 2}, {8, 11, 1}}));
  EXPECT_EQ(find(toks, "<a>b>"), (std::vector<AddedMatch>{{0, 3, 1}, {3, 5, 3}}));
}

TEST(AddedTokens, SpecialSkippedStillHidesInnerMatches) {
  const std::vector<AddedToken> toks = {token(1, "<|x|>"), token(2, "x", false)};
  EXPECT_EQ(find(toks, "<|x|> x", false), (std::vector<AddedMatch>{{6, 7, 2}}));
  EXPECT_EQ(find(toks, "<|x|> x", true), (std::vector<AddedMatch>{{0, 5, 1}, {6, 7, 2}}));
}

TEST(AddedTokens, StripAndSingleWord) {
  AddedToken l = token(1, "<L>"), r = token(2, "<R>"), w = token(3, "ab");
  l.lstrip = true;
  r.rstrip = true;
  w.single_word = true;
  const std::vector<AddedToken> toks = {l, r, w};
  EXPECT_EQ(find(toks, "x \t <L> y"), (std::vector<AddedMatch>{{1, 7, 1}}));
  EXPECT_EQ(find(toks, "x <R> \n y"), (std::vector<AddedMatch>{{2, 8, 2}}));
  EXPECT_EQ(find(toks, "<R>  <L>"), (std::vector<AddedMatch>{{0, 5, 2}, {5, 8, 1}}));
  EXPECT_EQ(find(toks,
                 "ab cab ab_ ab. \xC3\xA9"
                 "ab"),
            (std::vector<AddedMatch>{{0, 2, 3}, {11, 13, 3}}));
}

// The textbook algorithm: repeatedly merge the lowest-ranked adjacent pair, leftmost first.
std::vector<int32_t> naive_bpe(
    std::vector<int32_t> ids,
    const std::map<std::pair<int32_t, int32_t>, std::pair<size_t, int32_t>>& rules) {
  for (;;) {
    size_t best = ids.size(), best_rank = SIZE_MAX;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const auto it = rules.find({ids[i], ids[i + 1]});
      if (it != rules.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best = i;
      }
    }
    if (best == ids.size()) return ids;
    ids[best] = rules.at({ids[best], ids[best + 1]}).second;
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

// With `shuffle`, the merges are ranked in a random order, which breaks their well-ordering and
// so takes the binary-heap path for long pieces too.
void check_bpe_against_naive(const fs::path& tokenizer_json, int rounds, bool shuffle = false) {
  const Json j = read_json_file(tokenizer_json);
  const Json& vocab = j["model"]["vocab"];
  std::map<std::pair<int32_t, int32_t>, std::pair<size_t, int32_t>> rules;
  std::vector<Merge> merges;
  for (const Json& m : j["model"]["merges"]) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m;
      a = s.substr(0, s.find(' '));
      b = s.substr(s.find(' ') + 1);
    } else {
      a = m[0];
      b = m[1];
    }
    merges.push_back({vocab.at(a), vocab.at(b), vocab.at(a + b)});
    rules.try_emplace({merges.back().left, merges.back().right}, merges.size() - 1,
                      merges.back().result);
  }
  if (shuffle) {
    std::mt19937 shuffle_rng(5);
    std::shuffle(merges.begin(), merges.end(), shuffle_rng);
    rules.clear();
    for (size_t r = 0; r < merges.size(); ++r) {
      rules.try_emplace({merges[r].left, merges[r].right}, r, merges[r].result);
    }
  }
  std::array<int32_t, 256> byte_ids;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(s, byte_to_code_point(static_cast<uint8_t>(b)));
    byte_ids[b] = vocab.at(s);
  }
  const Bpe bpe(byte_ids, merges, -1, false, {});
  EXPECT_EQ(bpe.well_ordered(), !shuffle);
  const std::vector<std::string> frags = {"the",          "in", "an", "er", " ",   "  ",
                                          "\n",           "a",  "e",  "s",  "ing", "tion",
                                          "\xE4\xBD\xA0", "0",  "=",  "aa", "ll"};
  std::mt19937 rng(4);
  for (int round = 0; round < rounds; ++round) {
    std::string piece;
    const int n = 1 + static_cast<int>(rng() % (round % 10 == 0 ? 200 : 12));
    for (int k = 0; k < n; ++k) piece += frags[rng() % frags.size()];
    std::vector<int32_t> start;
    for (const char c : piece) start.push_back(byte_ids[static_cast<uint8_t>(c)]);
    std::vector<int32_t> got;
    bpe.encode_uncached(piece, got);
    ASSERT_EQ(got, naive_bpe(start, rules)) << "piece '" << piece << "'";
    std::vector<int32_t> cached;
    bpe.encode(piece, cached);
    bpe.encode(piece, cached);
    ASSERT_EQ(cached.size(), 2 * got.size());
  }
}

TEST(Bpe, HeapAgreesWithNaiveTiny) { check_bpe_against_naive(test::kTinyJson, 3000); }
TEST(Bpe, HeapAgreesWithNaiveQwen3) { check_bpe_against_naive(test::kQwen3Json, 1500); }
TEST(Bpe, HeapAgreesWithNaiveShuffled) { check_bpe_against_naive(test::kTinyJson, 2000, true); }

}  // namespace
}  // namespace kiln::text
