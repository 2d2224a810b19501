// Loading a training file in any data format (formats.h) into flat token arrays, through a
// memory-mapped tokenized cache (token_cache.h) for the text formats.
//
//   load_dataset(options, vocab_size)
//     tokens:        parse the JSONL in parallel, in memory (parsing ids is as fast as a cache)
//     text formats:  <cache dir>/<stem>-<key>.bin valid? map it ("data cache hit")
//                    else tokenize in parallel (OpenMP over lines, results in line order), write
//                    the cache atomically and map it; a corrupt cache is rebuilt with a warning
//
// Examples longer than seq_len are cut to their first seq_len tokens or left out (Overlong); a bad
// line is an error naming "file:line", or skipped and counted with skip_bad_lines.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/checksum.h"
#include "kiln/base/file.h"
#include "kiln/data/example_source.h"
#include "kiln/data/formats.h"
#include "kiln/data/overlong.h"

namespace kiln {

namespace fs = std::filesystem;

struct DataOptions {
  fs::path path;  // the JSONL file
  DataFormat format = DataFormat::kTokens;
  fs::path tokenizer;  // tokenizer.json or a directory holding one; unused for kTokens
  int seq_len = 512;   // > 0: the longest example kept
  Overlong overlong = Overlong::kTruncate;
  bool train_on_prompt = false;
  // The chat formats' template (chat_template_choice.h): "" (the tokenizer directory's own) or
  // qwen2.5 | qwen3 | llama3, named in errors by template_key; and Qwen3's thinking switch
  // (unset: the template's default), named by thinking_key.
  std::string chat_template;
  std::string template_key = "data.template";
  std::optional<bool> enable_thinking;
  std::string thinking_key = "data.enable_thinking";
  bool skip_bad_lines = false;
  bool use_cache = true;  // read and write the tokenized cache (text formats)
  fs::path cache_dir;     // empty: <directory of path>/.kiln-cache
  bool verbose = true;    // log counts, cache hits and skipped lines
};

// What loading found. Counts are over the file's non-blank lines.
struct DataStats {
  int64_t lines = 0;      // non-blank lines read
  int64_t examples = 0;   // examples kept
  int64_t tokens = 0;     // tokens in the kept examples, after truncation
  int64_t targets = 0;    // tokens that take loss (a label at position >= 1)
  int64_t truncated = 0;  // examples cut to seq_len (overlong: truncate)
  int64_t dropped = 0;    // examples longer than seq_len left out (overlong: drop)
  int64_t skipped = 0;    // bad lines skipped (skip_bad_lines)
  int64_t no_target = 0;  // kept examples with no token that takes loss (e.g. all cut off)
  int64_t max_id = -1;    // the largest token id
  FileDigest source;      // the file's length and XXH3-64, as read (checkpoints record it)
  bool operator==(const DataStats&) const = default;
};

// A dataset as three flat arrays, owned or memory-mapped from a cache file:
//   offsets (N+1), example i = tokens [offsets[i], offsets[i+1]) of
//   input_ids (tokens) and labels (tokens).
class TokenizedDataset : public ExampleSource {
 public:
  TokenizedDataset() = default;
  TokenizedDataset(TokenizedDataset&&) = default;
  TokenizedDataset& operator=(TokenizedDataset&&) = default;
  TokenizedDataset(const TokenizedDataset&) = delete;
  TokenizedDataset& operator=(const TokenizedDataset&) = delete;

  // Owns the arrays.
  TokenizedDataset(std::vector<uint64_t> offsets, std::vector<int32_t> input_ids,
                   std::vector<int32_t> labels, DataStats stats, std::string what);
  // Borrows the arrays from `map`, which it keeps.
  TokenizedDataset(MappedFile map, std::span<const uint64_t> offsets,
                   std::span<const int32_t> input_ids, std::span<const int32_t> labels,
                   DataStats stats, std::string what);

  size_t size() const override { return offsets_.empty() ? 0 : offsets_.size() - 1; }
  ExampleView example(size_t i) const override;
  const std::string& what() const override { return what_; }

  const DataStats& stats() const { return stats_; }
  std::span<const uint64_t> offsets() const { return offsets_; }
  std::span<const int32_t> input_ids() const { return ids_; }
  std::span<const int32_t> labels() const { return labels_; }
  // The cache file it is mapped from; empty when in memory.
  const fs::path& cache_path() const { return map_.path(); }
  bool from_cache_hit() const { return cache_hit_; }
  void set_cache_hit(bool hit) { cache_hit_ = hit; }

 private:
  std::vector<uint64_t> own_offsets_;
  std::vector<int32_t> own_ids_, own_labels_;
  MappedFile map_;
  std::span<const uint64_t> offsets_;
  std::span<const int32_t> ids_, labels_;
  DataStats stats_;
  std::string what_;
  bool cache_hit_ = false;
};

// Encodes JSONL `text` (lines of one format), or a JSON array of records (source_lines.h), in
// parallel into a dataset; `name` is the file named in errors ("name:line: ..."). Throws
// kiln::Error for a bad line (unless skip_bad_lines) or when no example is left.
TokenizedDataset read_jsonl(std::string_view text, const std::string& name,
                            const LineEncoder& encoder, int seq_len, Overlong overlong,
                            bool skip_bad_lines, bool verbose = false);

// Loads options.path as described at the top. Every token id must be < vocab_size.
TokenizedDataset load_dataset(const DataOptions& options, int64_t vocab_size);

// The chat template of `options` (chat_template_choice.h; also checks enable_thinking against it);
// nullptr for a format that is not a chat.
const ChatTemplate* data_chat_template(const DataOptions& options);

// The cache file load_dataset uses for `options` (a text format): its name holds a hash of the
// data file's path, size, modification time and content (XXH3-64 of the whole file up to 64 MiB,
// else of its first and last MiB and 64 blocks between), the tokenizer.json's content, the format,
// the chat template and enable_thinking (chat formats), seq_len, overlong, train_on_prompt,
// skip_bad_lines and the cache format version.
fs::path data_cache_path(const DataOptions& options);
// That hash.
uint64_t data_cache_key(const DataOptions& options);

// The tokenizer.json that `tokenizer` (a file or a model directory) names.
fs::path tokenizer_json_path(const fs::path& tokenizer);

}  // namespace kiln
