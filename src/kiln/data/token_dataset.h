// Pre-tokenized training examples: data format "tokens", JSONL with one object per line,
//   {"input_ids": [151644, 872, ...], "labels": [-100, -100, ...]}
// "labels" is optional (defaults to input_ids) and, when given, has the same length; a label of
// kIgnoreIndex (-100) takes no loss at that position. Blank lines are skipped, other fields are
// ignored.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/ignore_index.h"
#include "kiln/base/json.h"
#include "kiln/data/example_source.h"

namespace kiln {

namespace fs = std::filesystem;

// One training sequence. Labels are unshifted (HF convention): labels[t] is the token the model
// should produce at position t-1; the sampler applies the shift.
struct Example {
  std::vector<int32_t> input_ids;  // (len), every id in [0, vocab_size)
  std::vector<int32_t> labels;     // (len), each an id in [0, vocab_size) or kIgnoreIndex

  ExampleView view() const { return {input_ids, labels}; }
};

// Reads obj[field] (Json or OrderedJson) as token ids: each in [0, vocab_size), or kIgnoreIndex
// when `labels`. `where` is "path:line".
template <typename J>
std::vector<int32_t> read_token_ids(const J& obj, const char* field, int64_t vocab_size,
                                    bool labels, const std::string& where) {
  const auto& v = obj.at(field);
  if (!v.is_array())
    fail("{}: '{}' must be a list of integers, got {}", where, field, json_preview(v));
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  const char* expected = labels ? "a non-negative integer or -100" : "a non-negative integer";
  for (size_t i = 0; i < v.size(); ++i) {
    const auto& x = v[i];
    int64_t id = 0;
    if (x.is_number_unsigned()) {
      id = static_cast<int64_t>(
          std::min<uint64_t>(x.template get<uint64_t>(), std::numeric_limits<int64_t>::max()));
    } else if (x.is_number_integer()) {
      id = x.template get<int64_t>();
    } else {
      fail("{}: {}[{}]: expected {}, got {}", where, field, i, expected, json_preview(x));
    }
    if (labels && id == kIgnoreIndex) {
      ids.push_back(kIgnoreIndex);
      continue;
    }
    if (id < 0) fail("{}: {}[{}]: expected {}, got {}", where, field, i, expected, id);
    if (id >= vocab_size) {
      fail("{}: {}[{}]: token id {} is out of range for vocab_size {}", where, field, i, id,
           vocab_size);
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// Parses one line of the "tokens" format; every id must be < vocab_size. Throws kiln::Error
// prefixed with `where` ("path:line") for a malformed line; `origin` is where the line starts in
// its file (parse_json).
Example parse_tokens_line(std::string_view line, int64_t vocab_size, const std::string& where,
                          TextPosition origin = {});

class TokenDataset : public ExampleSource {
 public:
  // Reads a "tokens" JSONL file. Every id must be < vocab_size. max_len > 0 truncates longer
  // examples to their first max_len tokens (see num_truncated()). Throws kiln::Error naming
  // "path:line" for a malformed line, and the path for a file without examples.
  static TokenDataset load(const fs::path& path, int64_t vocab_size, int max_len = 0);

  // Wraps examples built elsewhere (other data formats, tests). Each must be non-empty with
  // labels of the same length; `what` names the source in errors.
  static TokenDataset from_examples(std::vector<Example> examples, std::string what,
                                    int max_len = 0);

  size_t size() const override { return examples_.size(); }
  const Example& operator[](size_t i) const { return examples_[i]; }
  ExampleView example(size_t i) const override { return examples_[i].view(); }

  // Truncates every example longer than max_len (> 0) to max_len tokens; returns how many were
  // cut, which also adds to num_truncated().
  size_t truncate(int max_len);
  // Examples cut by truncation so far.
  size_t num_truncated() const { return num_truncated_; }
  // Tokens in all examples, after truncation.
  int64_t num_tokens() const;
  // The source file (or the `what` of from_examples), for messages.
  const std::string& what() const override { return what_; }

 private:
  std::vector<Example> examples_;
  std::string what_;
  size_t num_truncated_ = 0;
};

}  // namespace kiln
