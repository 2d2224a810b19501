#include "kiln/data/token_dataset.h"

#include <algorithm>
#include <limits>
#include <string_view>

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/data/batch.h"

namespace kiln {

Example parse_tokens_line(std::string_view line, int64_t vocab_size, const std::string& where,
                          TextPosition origin) {
  Json obj = parse_json(line, where, origin);
  if (!obj.is_object()) fail("{}: expected a JSON object, got {}", where, json_preview(obj));
  if (!obj.contains("input_ids")) fail("{}: missing 'input_ids'", where);
  Example ex;
  ex.input_ids = read_token_ids(obj, "input_ids", vocab_size, false, where);
  if (ex.input_ids.empty()) fail("{}: 'input_ids' is empty", where);
  if (obj.contains("labels") && !obj["labels"].is_null()) {
    ex.labels = read_token_ids(obj, "labels", vocab_size, true, where);
    if (ex.labels.size() != ex.input_ids.size()) {
      fail("{}: 'labels' has {} entries but 'input_ids' has {}", where, ex.labels.size(),
           ex.input_ids.size());
    }
  } else {
    ex.labels = ex.input_ids;
  }
  return ex;
}

namespace {

bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

}  // namespace

TokenDataset TokenDataset::load(const fs::path& path, int64_t vocab_size, int max_len) {
  KILN_CHECK(vocab_size > 0, "vocab_size {}", vocab_size);
  MappedFile file(path);
  std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  std::vector<Example> examples;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (is_blank(line)) continue;
    examples.push_back(parse_tokens_line(
        line, vocab_size, fmt::format("{}:{}", path.string(), line_no), {line_no, 1}));
  }
  if (examples.empty()) fail("{}: no examples", path.string());
  TokenDataset ds;
  ds.examples_ = std::move(examples);
  ds.what_ = path.string();
  if (max_len > 0) ds.truncate(max_len);
  return ds;
}

TokenDataset TokenDataset::from_examples(std::vector<Example> examples, std::string what,
                                         int max_len) {
  for (const Example& ex : examples) {
    KILN_CHECK(!ex.input_ids.empty() && ex.labels.size() == ex.input_ids.size(),
               "{}: example with {} input_ids and {} labels", what, ex.input_ids.size(),
               ex.labels.size());
  }
  TokenDataset ds;
  ds.examples_ = std::move(examples);
  ds.what_ = std::move(what);
  if (max_len > 0) ds.truncate(max_len);
  return ds;
}

size_t TokenDataset::truncate(int max_len) {
  KILN_CHECK(max_len > 0, "max_len {}", max_len);
  size_t cut = 0;
  for (Example& ex : examples_) {
    if (ex.input_ids.size() <= static_cast<size_t>(max_len)) continue;
    ex.input_ids.resize(max_len);
    ex.labels.resize(max_len);
    ++cut;
  }
  num_truncated_ += cut;
  return cut;
}

int64_t TokenDataset::num_tokens() const {
  int64_t n = 0;
  for (const Example& ex : examples_) n += static_cast<int64_t>(ex.input_ids.size());
  return n;
}

}  // namespace kiln
