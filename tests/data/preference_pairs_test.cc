// data.format preference (data/preference_pairs.h): TRL's three forms of a pair as one example
// that splits back into its chosen and rejected sequences, labels on the completions only; the
// prompt-first fit to seq_len; pairs left out; the sampler keeping a pair's two rows together on
// every rank; and bad records as one-line errors.
#include "kiln/data/preference_pairs.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "common/error_of.h"
#include "data/data_test_util.h"
#include "kiln/base/ignore_index.h"
#include "kiln/data/formats.h"
#include "kiln/data/sampler.h"
#include "kiln/data/token_dataset.h"
#include "kiln/text/chat_template.h"

namespace kiln {
namespace {

using Ids = std::vector<int32_t>;

// The error of `f` (common/error_of.h) holds `msg`.
#define EXPECT_HAS_ERROR(f, msg) EXPECT_HAS(testing::error_of(f), msg)

Ids ids_of(std::span<const int32_t> s) { return Ids(s.begin(), s.end()); }

// A sequence's labels: none on the prompt (and the first token), the completion's ids after.
Ids labels_of(const Ids& prompt, const Ids& completion) {
  Ids l(prompt.size(), kIgnoreIndex);
  l.insert(l.end(), completion.begin(), completion.end());
  l[0] = kIgnoreIndex;
  return l;
}

Ids concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void expect_pair(const Example& ex, const Ids& prompt, const Ids& chosen, const Ids& rejected) {
  const auto [c, r] = pair_sequences(ex.view());
  EXPECT_EQ(ids_of(c.input_ids), concat(prompt, chosen));
  EXPECT_EQ(ids_of(c.labels), labels_of(prompt, chosen));
  EXPECT_EQ(ids_of(r.input_ids), concat(prompt, rejected));
  EXPECT_EQ(ids_of(r.labels), labels_of(prompt, rejected));
}

TEST(PreferencePairs, PreTokenizedIsUsedAsGivenInBothNamings) {
  const LineEncoder enc(DataFormat::kPreference, nullptr, 1000, false);
  expect_pair(enc.encode(R"({"prompt_input_ids": [5, 6, 7], "chosen_input_ids": [8, 9],
                             "rejected_input_ids": [10]})",
                         "t:1"),
              {5, 6, 7}, {8, 9}, {10});
  expect_pair(
      enc.encode(R"({"prompt_ids": [1], "chosen_ids": [2, 3, 4], "rejected_ids": [5, 6]})", "t:2"),
      {1}, {2, 3, 4}, {5, 6});
}

TEST(PreferencePairs, StandardTextGetsTheEndTokenAfterEachCompletion) {
  const Tokenizer& tok = test::qwen();
  const LineEncoder enc(DataFormat::kPreference, &tok, test::kVocab, false);
  // TRL: each text tokenized alone, no BOS, eos_token_id after each completion (the Qwen3
  // tokenizer here has no tokenizer_config.json: the end of text).
  const Ids eot = {test::kEndOfText};
  expect_pair(
      enc.encode(R"({"prompt": "The sky is", "chosen": " blue.", "rejected": " green."})", "t:1"),
      tok.encode("The sky is"), concat(tok.encode(" blue."), eot),
      concat(tok.encode(" green."), eot));
  // Other tools' name for the prompt.
  expect_pair(enc.encode(R"({"question": "Q?", "chosen": "A", "rejected": "B"})", "t:2"),
              tok.encode("Q?"), concat(tok.encode("A"), eot), concat(tok.encode("B"), eot));
}

TEST(PreferencePairs, ConversationalRendersThePromptWithItsGenerationPrompt) {
  const Tokenizer& tok = test::qwen();
  const ChatTemplate& qwen25 = chat_template(ChatTemplateId::kQwen25);
  const LineEncoder enc(DataFormat::kPreference, &tok, test::kVocab, false, &qwen25);
  const Example ex = enc.encode(
      R"({"prompt": [{"role": "user", "content": "Hi"}],
          "chosen": [{"role": "assistant", "content": "Hello!"}],
          "rejected": [{"role": "assistant", "content": "Go away."}]})",
      "t:1");
  const auto [c, r] = pair_sequences(ex.view());
  // The prompt ends with the generation prompt; each completion is the assistant's reply and
  // what the template renders after it, then the end token (TRL's maybe_apply_chat_template and
  // tokenize_row).
  const std::string prompt =
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
      "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  const Ids p = tok.encode(prompt);
  const Ids eot = {test::kEndOfText};
  EXPECT_EQ(ids_of(c.input_ids), concat(concat(p, tok.encode("Hello!<|im_end|>\n")), eot));
  EXPECT_EQ(ids_of(r.input_ids), concat(concat(p, tok.encode("Go away.<|im_end|>\n")), eot));
  EXPECT_EQ(ids_of(c.labels), labels_of(p, concat(tok.encode("Hello!<|im_end|>\n"), eot)));
}

// TRL's maybe_extract_prompt: no prompt, or a text prompt beside message lists, and the prompt is
// what both completions start with.
TEST(PreferencePairs, AnImplicitPromptIsWhatBothCompletionsStartWith) {
  const Tokenizer& tok = test::qwen();
  const LineEncoder enc(DataFormat::kPreference, &tok, test::kVocab, false);
  const Ids eot = {test::kEndOfText};
  // Text: up to the first difference, the space before it going with the completions.
  expect_pair(
      enc.encode(R"({"chosen": "The sky is blue.", "rejected": "The sky is green."})", "t:1"),
      tok.encode("The sky is"), concat(tok.encode(" blue."), eot),
      concat(tok.encode(" green."), eot));
  // The first difference inside a multi-byte character: the prompt stops before the character.
  expect_pair(enc.encode(R"({"chosen": "café ok", "rejected": "cafè no"})", "t:2"),
              tok.encode("caf"), concat(tok.encode("\u00e9 ok"), eot),
              concat(tok.encode("\u00e8 no"), eot));
  // One a prefix of the other: the prompt stops before the shorter's last character (TRL's loop).
  expect_pair(enc.encode(R"({"chosen": "abc", "rejected": "abcd"})", "t:3"), tok.encode("ab"),
              concat(tok.encode("c"), eot), concat(tok.encode("cd"), eot));
  // Messages, with a text prompt that they hold too (ultrafeedback_binarized): the shared
  // messages are the prompt, rendered as a conversational record's.
  const ChatTemplate& qwen25 = chat_template(ChatTemplateId::kQwen25);
  const LineEncoder chat(DataFormat::kPreference, &tok, test::kVocab, false, &qwen25);
  const std::string user = R"({"role": "user", "content": "Hi"})";
  const std::string a = R"({"role": "assistant", "content": "Hello!"})";
  const std::string b = R"({"role": "assistant", "content": "Go away."})";
  const Example implicit = chat.encode("{\"prompt\": \"Hi\", \"chosen\": [" + user + ", " + a +
                                           "], \"rejected\": [" + user + ", " + b + "]}",
                                       "t:4");
  const Example explicit_prompt = chat.encode(
      "{\"prompt\": [" + user + "], \"chosen\": [" + a + "], \"rejected\": [" + b + "]}", "t:5");
  EXPECT_EQ(implicit.input_ids, explicit_prompt.input_ids);
  EXPECT_EQ(implicit.labels, explicit_prompt.labels);
}

TEST(PreferencePairs, FitCutsThePromptFirstAndLeavesOutWhatCannotTrain) {
  const LineEncoder enc(DataFormat::kPreference, nullptr, 1000, false);
  const auto pair = [&](const std::string& line) { return enc.encode(line, "t:1"); };
  // chosen: 6 + 3 = 9 tokens, rejected 6 + 1 = 7; seq_len 5 cuts 4 and 2 prompt tokens.
  Example ex = pair(R"({"prompt_input_ids": [1, 2, 3, 4, 5, 6], "chosen_input_ids": [7, 8, 9],
                        "rejected_input_ids": [10]})");
  EXPECT_EQ(fit_pair(ex, 9, Overlong::kTruncate), PairFit::kKept);
  EXPECT_EQ(fit_pair(ex, 5, Overlong::kDrop), PairFit::kDropped);
  EXPECT_EQ(fit_pair(ex, 5, Overlong::kTruncate), PairFit::kTruncated);
  {
    const auto [c5, r5] = pair_sequences(ex.view());
    EXPECT_EQ(ids_of(c5.input_ids), (Ids{5, 6, 7, 8, 9}));
    EXPECT_EQ(ids_of(c5.labels), (Ids{kIgnoreIndex, kIgnoreIndex, 7, 8, 9}));
  }
  auto [c, r] = pair_sequences(ex.view());
  EXPECT_EQ(ids_of(r.input_ids), (Ids{3, 4, 5, 6, 10}));
  // A completion longer than seq_len alone loses its end too, and no prompt is left.
  ex = pair(R"({"prompt_input_ids": [1], "chosen_input_ids": [2, 3, 4, 5, 6, 7],
                "rejected_input_ids": [8]})");
  EXPECT_EQ(fit_pair(ex, 4, Overlong::kTruncate), PairFit::kTruncated);
  std::tie(c, r) = pair_sequences(ex.view());
  EXPECT_EQ(ids_of(c.input_ids), (Ids{2, 3, 4, 5}));
  EXPECT_EQ(ids_of(c.labels), (Ids{kIgnoreIndex, 3, 4, 5}));
  EXPECT_EQ(ids_of(r.input_ids), (Ids{1, 8}));
  // Empty completions and identical completions are left out, not trained on.
  ex = pair(R"({"prompt_input_ids": [1, 2], "chosen_input_ids": [], "rejected_input_ids": [3]})");
  EXPECT_EQ(fit_pair(ex, 8, Overlong::kTruncate), PairFit::kEmpty);
  ex = pair(R"({"prompt_input_ids": [1, 2], "chosen_input_ids": [3], "rejected_input_ids": [3]})");
  EXPECT_EQ(fit_pair(ex, 8, Overlong::kTruncate), PairFit::kIdentical);
}

TEST(PreferencePairs, BadRecordsAreOneLine) {
  const LineEncoder pre(DataFormat::kPreference, nullptr, 100, false);
  EXPECT_HAS_ERROR(
      [&] { pre.encode(R"({"prompt_input_ids": [1], "chosen_input_ids": [2]})", "f.jsonl:3"); },
      "f.jsonl:3: missing field 'rejected_input_ids'");
  EXPECT_HAS_ERROR(
      [&] {
        pre.encode(R"({"prompt_ids": [1], "chosen_ids": [200],
                                          "rejected_ids": [2]})",
                   "f.jsonl:4");
      },
      "f.jsonl:4: chosen_ids[0]: token id 200 is out of range for vocab_size 100");
  EXPECT_HAS_ERROR(
      [&] { pre.encode(R"({"prompt": "a", "chosen": "b", "rejected": "c"})", "f.jsonl:5"); },
      "f.jsonl:5: prompt, chosen and rejected as text need a tokenizer");
  const LineEncoder text(DataFormat::kPreference, &test::qwen(), test::kVocab, false);
  EXPECT_HAS_ERROR([&] { text.encode(R"({"prompt": "a", "chosen": "b"})", "f.jsonl:6"); },
                   "f.jsonl:6: missing field 'rejected'");
  EXPECT_HAS_ERROR([&] { text.encode(R"({"chosen": "b", "rejected": ["c"]})", "f.jsonl:7"); },
                   "f.jsonl:7: chosen and rejected must both be texts or both message lists");
  EXPECT_HAS_ERROR(
      [&] { text.encode(R"({"prompt": "a", "chosen": 5, "rejected": "c"})", "f.jsonl:8"); },
      "f.jsonl:8: chosen: expected a string, got 5");
}

TEST(PreferencePairs, RecordsAreInferredAsPreference) {
  EXPECT_EQ(infer_data_format(OrderedJson::parse(R"({"prompt": "a", "chosen": "b",
                                                     "rejected": "c"})")),
            DataFormat::kPreference);
  EXPECT_EQ(infer_data_format(OrderedJson::parse(R"({"chosen_input_ids": [1]})")),
            DataFormat::kPreference);
  EXPECT_EQ(parse_data_format("preference"), DataFormat::kPreference);
}

// Pairs 0..11 at two ranks, 2 pairs (4 rows) each a micro-batch: every pair once per epoch, its
// chosen in an even row and its rejected in the next, and the group's position counted in pairs.
TEST(PreferencePairs, TheSamplerKeepsAPairsRowsTogetherOnEveryRank) {
  std::vector<Example> pairs;
  const LineEncoder enc(DataFormat::kPreference, nullptr, 1000, false);
  for (int p = 0; p < 12; ++p) {
    pairs.push_back(
        enc.encode(fmt::format(R"({{"prompt_input_ids": [{}], "chosen_input_ids": [{}, 1],
                        "rejected_input_ids": [{}]}})",
                               p, 100 + p, 200 + p),
                   "t"));
  }
  const TokenDataset data = TokenDataset::from_examples(pairs, "pairs");
  std::set<int> seen;
  for (int rank = 0; rank < 2; ++rank) {
    Sampler s(data, 4, 8, /*shuffle=*/true, 9, rank, 2, /*rows_per_example=*/2);
    EXPECT_EQ(s.batches_per_epoch(), 3);
    Batch b;
    for (int i = 0; i < 3; ++i) {
      s.next(b);
      ASSERT_EQ(b.B, 4);
      for (int k = 0; k < 2; ++k) {
        const int p = b.input_ids[2 * k * b.T];
        EXPECT_EQ(b.input_ids[2 * k * b.T + 1], 100 + p);
        EXPECT_EQ(b.targets[2 * k * b.T], 100 + p);  // the prompt predicts the completion
        EXPECT_EQ(b.input_ids[(2 * k + 1) * b.T], p);
        EXPECT_EQ(b.input_ids[(2 * k + 1) * b.T + 1], 200 + p);
        EXPECT_TRUE(seen.insert(p).second) << "pair " << p << " twice";
      }
      EXPECT_EQ(b.num_pairs(), 2);
    }
    EXPECT_EQ(s.state().position, 12u);
  }
  EXPECT_EQ(seen.size(), 12u);
}

}  // namespace
}  // namespace kiln
