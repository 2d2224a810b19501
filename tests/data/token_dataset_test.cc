#include "kiln/data/token_dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/temp_dir.h"
#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/data/batch.h"

namespace kiln {
namespace {

using Ids = std::vector<int32_t>;

class TokenDatasetTest : public ::testing::Test {
 protected:
  fs::path write(const std::string& text) {
    fs::path p = dir_ / "train.jsonl";
    write_file_atomic(p, text);
    return p;
  }

  // The message of the kiln::Error that loading `text` throws; checks it is one line naming the
  // file.
  std::string error_of(const std::string& text, int64_t vocab = 100) {
    fs::path p = write(text);
    try {
      TokenDataset::load(p, vocab);
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
      return msg;
    }
    ADD_FAILURE() << "no error for:\n" << text;
    return "";
  }

  std::string at(int line) { return fmt::format("{}:{}: ", (dir_ / "train.jsonl").string(), line); }

  testing::TempDir tmp_{"kiln_token_dataset_test"};
  const fs::path dir_ = tmp_.path();
};

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST_F(TokenDatasetTest, LoadsExamples) {
  fs::path p = write(
      "{\"input_ids\": [1, 2, 3]}\n"
      "\n"
      "   \r\n"
      "{\"input_ids\": [4, 5, 6, 7], \"labels\": [-100, -100, 6, 7], \"text\": \"ignored\"}\r\n"
      "{\"labels\": null, \"input_ids\": [99]}");  // no final newline
  TokenDataset ds = TokenDataset::load(p, 100);
  ASSERT_EQ(ds.size(), 3u);
  EXPECT_EQ(ds[0].input_ids, (Ids{1, 2, 3}));
  EXPECT_EQ(ds[0].labels, (Ids{1, 2, 3}));
  EXPECT_EQ(ds[1].input_ids, (Ids{4, 5, 6, 7}));
  EXPECT_EQ(ds[1].labels, (Ids{kIgnoreIndex, kIgnoreIndex, 6, 7}));
  EXPECT_EQ(ds[2].input_ids, (Ids{99}));
  EXPECT_EQ(ds[2].labels, (Ids{99}));
  EXPECT_EQ(ds.num_tokens(), 8);
  EXPECT_EQ(ds.num_truncated(), 0u);
  EXPECT_EQ(ds.what(), p.string());
}

TEST_F(TokenDatasetTest, Truncates) {
  fs::path p = write(
      "{\"input_ids\": [1, 2, 3, 4, 5], \"labels\": [-100, 2, 3, 4, 5]}\n"
      "{\"input_ids\": [1, 2, 3]}\n"
      "{\"input_ids\": [1, 2, 3, 4]}\n");
  TokenDataset ds = TokenDataset::load(p, 10, 3);
  EXPECT_EQ(ds.num_truncated(), 2u);
  EXPECT_EQ(ds[0].input_ids, (Ids{1, 2, 3}));
  EXPECT_EQ(ds[0].labels, (Ids{kIgnoreIndex, 2, 3}));
  EXPECT_EQ(ds[1].input_ids, (Ids{1, 2, 3}));
  EXPECT_EQ(ds[2].input_ids, (Ids{1, 2, 3}));
  EXPECT_EQ(ds.num_tokens(), 9);
  EXPECT_EQ(ds.truncate(2), 3u);
  EXPECT_EQ(ds.num_truncated(), 5u);

  EXPECT_EQ(TokenDataset::load(p, 10).num_truncated(), 0u);
}

TEST_F(TokenDatasetTest, FromExamples) {
  TokenDataset ds =
      TokenDataset::from_examples({{{1, 2, 3}, {1, 2, 3}}, {{4}, {kIgnoreIndex}}}, "memory", 2);
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds[0].input_ids, (Ids{1, 2}));
  EXPECT_EQ(ds[1].labels, (Ids{kIgnoreIndex}));
  EXPECT_EQ(ds.num_truncated(), 1u);
  EXPECT_EQ(ds.what(), "memory");
}

TEST_F(TokenDatasetTest, InvalidJson) {
  std::string msg = error_of("{\"input_ids\": [1]}\n{\"input_ids\": [1,\n");
  EXPECT_HAS(msg, at(2));
  EXPECT_HAS(msg, "malformed JSON");
  EXPECT_HAS(error_of("[1, 2]\n"), at(1) + "expected a JSON object, got [1,2]");
}

TEST_F(TokenDatasetTest, MissingInputIds) {
  EXPECT_HAS(error_of("\n{\"input_ids\": [1]}\n\n{\"labels\": [1]}\n"),
             at(4) + "missing 'input_ids'");
}

TEST_F(TokenDatasetTest, NonIntegerIds) {
  EXPECT_HAS(error_of("{\"input_ids\": [1, 2.5]}\n"),
             at(1) + "input_ids[1]: expected a non-negative integer, got 2.5");
  EXPECT_HAS(error_of("{\"input_ids\": [\"a\"]}\n"),
             at(1) + "input_ids[0]: expected a non-negative integer, got \"a\"");
  EXPECT_HAS(error_of("{\"input_ids\": [true]}\n"),
             "input_ids[0]: expected a non-negative integer");
  EXPECT_HAS(error_of("{\"input_ids\": 5}\n"), at(1) + "'input_ids' must be a list of integers");
  EXPECT_HAS(error_of("{\"input_ids\": [1], \"labels\": [0.5]}\n"),
             at(1) + "labels[0]: expected a non-negative integer or -100, got 0.5");
}

TEST_F(TokenDatasetTest, NegativeIds) {
  EXPECT_HAS(error_of("{\"input_ids\": [1]}\n{\"input_ids\": [3, -1]}\n"),
             at(2) + "input_ids[1]: expected a non-negative integer, got -1");
  // -100 is a mask only in labels.
  EXPECT_HAS(error_of("{\"input_ids\": [-100]}\n"), at(1) + "input_ids[0]");
  EXPECT_HAS(error_of("{\"input_ids\": [1, 2], \"labels\": [-100, -2]}\n"),
             at(1) + "labels[1]: expected a non-negative integer or -100, got -2");
}

TEST_F(TokenDatasetTest, IdsBeyondVocab) {
  EXPECT_HAS(error_of("{\"input_ids\": [1, 100]}\n", 100),
             at(1) + "input_ids[1]: token id 100 is out of range for vocab_size 100");
  EXPECT_HAS(error_of("{\"input_ids\": [18446744073709551615]}\n", 100),
             "input_ids[0]: token id 9223372036854775807 is out of range for vocab_size 100");
  EXPECT_HAS(error_of("{\"input_ids\": [1, 2], \"labels\": [1, 500]}\n", 100),
             at(1) + "labels[1]: token id 500 is out of range for vocab_size 100");
  EXPECT_EQ(TokenDataset::load(write("{\"input_ids\": [99]}"), 100).size(), 1u);
}

TEST_F(TokenDatasetTest, LabelsLengthMismatch) {
  EXPECT_HAS(error_of("{\"input_ids\": [1, 2, 3], \"labels\": [1, 2]}\n"),
             at(1) + "'labels' has 2 entries but 'input_ids' has 3");
}

TEST_F(TokenDatasetTest, EmptyInputIds) {
  EXPECT_HAS(error_of("{\"input_ids\": []}\n"), at(1) + "'input_ids' is empty");
}

TEST_F(TokenDatasetTest, NoExamples) {
  EXPECT_HAS(error_of(""), "no examples");
  EXPECT_HAS(error_of("\n  \n"), "no examples");
}

TEST_F(TokenDatasetTest, MissingFile) {
  try {
    TokenDataset::load(dir_ / "absent.jsonl", 10);
    FAIL();
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "absent.jsonl");
  }
}

}  // namespace
}  // namespace kiln
