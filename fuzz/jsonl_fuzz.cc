// libFuzzer target for the JSONL data reader (read_jsonl with every data format's LineEncoder):
// any bytes must load or fail with kiln::Error, never crash. A dataset that loads must keep its
// invariants: consistent offsets, no example empty or longer than seq_len, ids in the
// vocabulary, each label either kIgnoreIndex or its position's id (text formats), and counts that
// add up. The input's size picks seq_len, overlong and skip_bad_lines, so all are reached.
// tests/data also runs this entry point over mutated JSONL lines in the ordinary (gcc) suite.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kiln/base/error.h"
#include "kiln/base/ignore_index.h"
#include "kiln/data/text_dataset.h"
#include "kiln/text/tokenizer.h"

namespace {

// The tiny Qwen-style tokenizer (with <|endoftext|>, <|im_start|>, <|im_end|>), loaded once.
const kiln::Tokenizer& tokenizer() {
  static const kiln::Tokenizer t = kiln::Tokenizer::load(
      std::string(KILN_SOURCE_DIR) + "/tests/fixtures/tokenizer/tiny_tokenizer.json");
  return t;
}

void check(bool ok) {
  if (!ok) std::abort();
}

void run(kiln::DataFormat format, std::string_view text, size_t size) {
  const int64_t vocab = tokenizer().vocab_size();
  const int seq_len = 4 + static_cast<int>(size % 61);
  const auto overlong = (size / 61) % 2 ? kiln::Overlong::kDrop : kiln::Overlong::kTruncate;
  const bool skip = (size / 122) % 2 == 1;
  const bool train_on_prompt = (size / 244) % 2 == 1;
  const kiln::LineEncoder encoder(format, &tokenizer(), vocab, train_on_prompt);
  try {
    const kiln::TokenizedDataset d =
        kiln::read_jsonl(text, "fuzz.jsonl", encoder, seq_len, overlong, skip);
    const kiln::DataStats& s = d.stats();
    check(d.size() > 0 && static_cast<int64_t>(d.size()) == s.examples);
    check(s.examples + s.dropped + s.skipped == s.lines);
    check(d.offsets().front() == 0 && d.offsets().back() == d.input_ids().size());
    check(static_cast<int64_t>(d.input_ids().size()) == s.tokens);
    for (size_t i = 0; i < d.size(); ++i) {
      const kiln::ExampleView ex = d.example(i);
      check(ex.size() > 0 && ex.size() <= static_cast<size_t>(seq_len));
      check(ex.labels.size() == ex.size());
      for (size_t t = 0; t < ex.size(); ++t) {
        check(ex.input_ids[t] >= 0 && ex.input_ids[t] < vocab);
        if (format != kiln::DataFormat::kTokens) {
          check(ex.labels[t] == kiln::kIgnoreIndex || ex.labels[t] == ex.input_ids[t]);
        }
      }
    }
  } catch (const kiln::Error&) {
    // a bad line, or no example left
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const std::string& name : kiln::data_format_names()) {
    run(*kiln::parse_data_format(name), text, size);
  }
  return 0;
}
