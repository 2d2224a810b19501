// Shared helpers for the data tests: the vendored Qwen3 tokenizer (loaded once per binary), the
// one-line error read_jsonl gives a text, and temporary directories.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "common/temp_dir.h"
#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/data/formats.h"
#include "kiln/data/text_dataset.h"
#include "kiln/text/tokenizer.h"

namespace kiln::test {

inline const fs::path kQwenTokenizer =
    fs::path(KILN_SOURCE_DIR) / "assets/tokenizer/qwen3/tokenizer.json";
inline const fs::path kTinyTokenizer =
    fs::path(KILN_SOURCE_DIR) / "tests/fixtures/tokenizer/tiny_tokenizer.json";

inline const Tokenizer& qwen() {
  static const Tokenizer t = Tokenizer::load(kQwenTokenizer);
  return t;
}

// Qwen2 special token ids.
inline constexpr int32_t kImStart = 151644, kImEnd = 151645, kEndOfText = 151643;
inline constexpr int32_t kVocab = 151936;  // Qwen2.5's embedding rows

// A fresh directory, removed with the object: kiln_data_test_<name>_<pid>.
class TempDir : public testing::TempDir {
 public:
  explicit TempDir(const std::string& name) : testing::TempDir("kiln_data_test", name) {}
};

// read_jsonl's error for `text` in `format` read as the file `name` (examples cut to seq_len),
// checked to be one line; "" when it loads.
inline std::string read_jsonl_error(DataFormat format, const std::string& text,
                                    const std::string& name, int seq_len) {
  try {
    read_jsonl(text, name, LineEncoder(format, &qwen(), kVocab, false), seq_len,
               Overlong::kTruncate, false);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  return "";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

}  // namespace kiln::test
