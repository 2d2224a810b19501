#include "kiln/data/text_dataset.h"

#include <omp.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>

#include "kiln/base/checksum.h"
#include "kiln/base/error.h"
#include "kiln/base/ignore_index.h"
#include "kiln/base/log.h"
#include "kiln/data/preference_pairs.h"
#include "kiln/data/source_lines.h"
#include "kiln/data/token_cache.h"
#include "kiln/text/chat_template_choice.h"

namespace kiln {

namespace {

std::string_view text_of(const MappedFile& file) {
  return {reinterpret_cast<const char*>(file.data()), file.size()};
}

// One line's outcome, filled by whichever thread encoded it.
struct LineResult {
  Example example;
  bool bad = false;
  std::string error;         // the kiln::Error of a bad line
  std::exception_ptr other;  // anything else: a bug, rethrown
};

// Which template renders the data; a warning when the setting overrides a template of the
// model's own, known to kiln or not (a run's model directories then carry the setting's:
// HfModelFiles). Logged whether the data is read or its cache is hit.
void log_chat_template(const DataOptions& o, const ChatTemplate& chat, const std::string& name) {
  KILN_LOG_INFO("data {}: chat template {}", name, chat.name());
  if (o.chat_template.empty()) return;
  const ModelChatTemplate own = model_chat_template(tokenizer_json_path(o.tokenizer));
  if (own.where.empty() || own.known == chat.id()) return;
  KILN_LOG_WARN("{}: the model's own chat template is {}; {} renders the data with {}", own.where,
                own.known ? chat_template(*own.known).name() : "not one kiln knows", o.template_key,
                chat.name());
}

void log_stats(const TokenizedDataset& d, int seq_len, const char* how, double seconds) {
  const DataStats& s = d.stats();
  KILN_LOG_INFO(
      "data {}: {} examples, {} tokens ({} take loss); {} truncated to seq_len {}, {} dropped, "
      "{} bad lines skipped ({} in {:.1f}s)",
      d.what(), s.examples, s.tokens, s.targets, s.truncated, seq_len, s.dropped, s.skipped, how,
      seconds);
  if (s.no_target > 0) {
    KILN_LOG_WARN("data {}: {} examples have no token that takes loss (cut off by seq_len {}?)",
                  d.what(), s.no_target, seq_len);
  }
}

// Preference pairs left out, by reason (fit_pair), for one line in the log.
struct PairCounts {
  int64_t empty = 0, identical = 0;
  void log(const std::string& name) const {
    if (empty > 0) {
      KILN_LOG_WARN("data {}: {} pairs left out: a completion is empty (after truncation)", name,
                    empty);
    }
    if (identical > 0) {
      KILN_LOG_WARN(
          "data {}: {} pairs left out: chosen equals rejected (no preference to learn from)", name,
          identical);
    }
  }
};

// Fits a pair example to seq_len (fit_pair), counting it in the stats (each pair counts once):
// false when it is left out.
bool keep_pair(Example& ex, int seq_len, Overlong overlong, DataStats& s, PairCounts& counts) {
  switch (fit_pair(ex, seq_len, overlong)) {
    case PairFit::kKept:
      return true;
    case PairFit::kTruncated:
      ++s.truncated;
      return true;
    case PairFit::kDropped:
      ++s.dropped;
      return false;
    case PairFit::kEmpty:
      ++counts.empty;
      return false;
    case PairFit::kIdentical:
      ++counts.identical;
      return false;
  }
  return false;
}

}  // namespace

TokenizedDataset::TokenizedDataset(std::vector<uint64_t> offsets, std::vector<int32_t> input_ids,
                                   std::vector<int32_t> labels, DataStats stats, std::string what)
    : own_offsets_(std::move(offsets)),
      own_ids_(std::move(input_ids)),
      own_labels_(std::move(labels)),
      offsets_(own_offsets_),
      ids_(own_ids_),
      labels_(own_labels_),
      stats_(stats),
      what_(std::move(what)) {
  KILN_CHECK(!offsets_.empty() && offsets_.back() == ids_.size() && ids_.size() == labels_.size(),
             "{}: inconsistent arrays", what_);
}

TokenizedDataset::TokenizedDataset(MappedFile map, std::span<const uint64_t> offsets,
                                   std::span<const int32_t> input_ids,
                                   std::span<const int32_t> labels, DataStats stats,
                                   std::string what)
    : map_(std::move(map)),
      offsets_(offsets),
      ids_(input_ids),
      labels_(labels),
      stats_(stats),
      what_(std::move(what)) {}

ExampleView TokenizedDataset::example(size_t i) const {
  const size_t b = offsets_[i], n = offsets_[i + 1] - b;
  return {ids_.subspan(b, n), labels_.subspan(b, n)};
}

TokenizedDataset read_jsonl(std::string_view text, const std::string& name,
                            const LineEncoder& encoder, int seq_len, Overlong overlong,
                            bool skip_bad_lines, bool verbose) {
  KILN_CHECK(seq_len > 0, "seq_len {}", seq_len);
  // JSONL lines, or the elements of a JSON array, each with its line.
  const std::vector<SourceLine> lines = source_lines(text, name);

  DataStats s;
  s.lines = static_cast<int64_t>(lines.size());
  s.source = {text.size(), xxh3_64(text)};
  std::vector<uint64_t> offsets = {0};
  std::vector<int32_t> ids, labels;
  // Blocks of lines bound the memory of results waiting to be appended in line order.
  constexpr size_t kBlock = 4096;
  std::vector<LineResult> results;
  int warned = 0;
  const bool pairs = encoder.format() == DataFormat::kPreference;
  PairCounts pair_counts;
  for (size_t begin = 0; begin < lines.size(); begin += kBlock) {
    const size_t end = std::min(begin + kBlock, lines.size());
    results.assign(end - begin, LineResult{});
#pragma omp parallel for schedule(dynamic, 4)
    for (size_t i = begin; i < end; ++i) {
      LineResult& r = results[i - begin];
      try {
        r.example = encoder.encode(lines[i].text, fmt::format("{}:{}", name, lines[i].number),
                                   lines[i].position());
      } catch (const Error& e) {
        r.bad = true;
        r.error = e.what();
      } catch (...) {
        r.other = std::current_exception();
      }
    }
    for (LineResult& r : results) {
      if (r.other) std::rethrow_exception(r.other);
      if (r.bad) {
        if (!skip_bad_lines) throw Error(r.error);
        ++s.skipped;
        if (verbose && warned++ < 5) KILN_LOG_WARN("skipping bad line: {}", r.error);
        continue;
      }
      Example& ex = r.example;
      if (pairs) {
        if (!keep_pair(ex, seq_len, overlong, s, pair_counts)) continue;
      } else if (ex.input_ids.size() > static_cast<size_t>(seq_len)) {
        if (overlong == Overlong::kDrop) {
          ++s.dropped;
          continue;
        }
        ex.input_ids.resize(seq_len);
        ex.labels.resize(seq_len);
        ++s.truncated;
      }
      // labels[0] is never predicted (nothing comes before it).
      const auto targets = std::count_if(ex.labels.begin() + 1, ex.labels.end(),
                                         [](int32_t l) { return l != kIgnoreIndex; });
      s.targets += targets;
      s.no_target += targets == 0;
      for (int32_t id : ex.input_ids) s.max_id = std::max<int64_t>(s.max_id, id);
      for (int32_t id : ex.labels) s.max_id = std::max<int64_t>(s.max_id, id);
      ids.insert(ids.end(), ex.input_ids.begin(), ex.input_ids.end());
      labels.insert(labels.end(), ex.labels.begin(), ex.labels.end());
      offsets.push_back(ids.size());
    }
  }
  s.examples = static_cast<int64_t>(offsets.size() - 1);
  s.tokens = static_cast<int64_t>(ids.size());
  if (pairs && verbose) pair_counts.log(name);
  if (s.examples == 0) {
    if (s.skipped > 0) fail("{}: no examples ({} bad lines skipped)", name, s.skipped);
    if (s.dropped > 0) {
      fail("{}: no examples ({} longer than seq_len {} dropped)", name, s.dropped, seq_len);
    }
    fail("{}: no examples", name);
  }
  return TokenizedDataset(std::move(offsets), std::move(ids), std::move(labels), s, name);
}

fs::path tokenizer_json_path(const fs::path& tokenizer) {
  return fs::is_directory(tokenizer) ? tokenizer / "tokenizer.json" : tokenizer;
}

const ChatTemplate* data_chat_template(const DataOptions& o) {
  if (o.format != DataFormat::kChat && o.format != DataFormat::kShareGpt &&
      o.format != DataFormat::kInstruction && o.format != DataFormat::kPreference) {
    return nullptr;
  }
  // Pre-tokenized preference pairs: no tokenizer, nothing to render.
  if (o.format == DataFormat::kPreference && !fs::exists(tokenizer_json_path(o.tokenizer))) {
    return nullptr;
  }
  const ChatTemplate& t =
      choose_chat_template(tokenizer_json_path(o.tokenizer), o.chat_template, o.template_key);
  check_enable_thinking(t, o.enable_thinking, o.thinking_key);
  return &t;
}

namespace {

// The data file's content, as far as it is cheap to read on every load: XXH3-64 of the whole
// file up to kWholeFileBytes, else of its first and last MiB and 64 blocks of 64 KiB spread
// evenly between them. A file edited in place with its size and mtime restored (rsync -t, a
// checkout, cp -p of another version) then still gets another cache.
uint64_t content_digest(const fs::path& path) {
  constexpr uint64_t kWholeFileBytes = uint64_t{64} << 20, kEdge = uint64_t{1} << 20;
  constexpr size_t kBlock = size_t{64} << 10;
  constexpr int kBlocks = 64;
  std::error_code ec;
  const uint64_t n = fs::file_size(path, ec);
  if (ec) fail("{}: cannot read: {}", path.string(), ec.message());
  if (n <= kWholeFileBytes) return digest_file(path).xxh3;
  Xxh3Stream h;
  hash_sampled_range(h, path, 0, kEdge, 2, kEdge);  // the first MiB, whole
  hash_sampled_range(h, path, kEdge, n - kEdge, kBlocks, kBlock);
  hash_sampled_range(h, path, n - kEdge, n, 2, kEdge);  // the last MiB, whole
  return h.digest().xxh3;
}

}  // namespace

uint64_t data_cache_key(const DataOptions& o) {
  const fs::path data = fs::absolute(o.path).lexically_normal();
  struct stat st {};
  if (::stat(data.c_str(), &st) != 0) {
    fail("{}: cannot read: {}", o.path.string(), std::strerror(errno));
  }
  const std::string tok = read_file(tokenizer_json_path(o.tokenizer));
  const ChatTemplate* chat = data_chat_template(o);
  const std::string thinking = o.enable_thinking ? (*o.enable_thinking ? "on" : "off") : "default";
  const std::string desc =
      fmt::format(
          "kiln data cache v{}\ndata={}\nsize={}\nmtime={}.{:09}\ncontent={:016x}\n"
          "tokenizer={:016x}\nformat={}\nseq_len={}\noverlong={}\ntrain_on_prompt={}\n"
          "skip_bad_lines={}\n",
          kTokenCacheVersion, data.string(), static_cast<int64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec), static_cast<int64_t>(st.st_mtim.tv_nsec),
          content_digest(data), hash_bytes(tok.data(), tok.size()), data_format_name(o.format),
          o.seq_len, name_of(kOverlongNames, o.overlong), o.train_on_prompt, o.skip_bad_lines) +
      (chat ? fmt::format("template={}\nenable_thinking={}\n", chat->name(), thinking) : "");
  return hash_bytes(desc.data(), desc.size());
}

namespace {
fs::path cache_path_for(const DataOptions& o, uint64_t key) {
  const fs::path dir = o.cache_dir.empty()
                           ? fs::absolute(o.path).lexically_normal().parent_path() / ".kiln-cache"
                           : o.cache_dir;
  return dir / fmt::format("{}-{:016x}.bin", o.path.stem().string(), key);
}
}  // namespace

fs::path data_cache_path(const DataOptions& o) { return cache_path_for(o, data_cache_key(o)); }

TokenizedDataset load_dataset(const DataOptions& o, int64_t vocab_size) {
  KILN_CHECK(vocab_size > 0 && o.seq_len > 0, "vocab_size {} seq_len {}", vocab_size, o.seq_len);
  const std::string name = o.path.string();
  const auto t0 = std::chrono::steady_clock::now();
  const auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // Token ids read as they are, in memory (parsing ids is as fast as a cache): the tokens format,
  // and preference pairs without a tokenizer (pre-tokenized; a text record is then an error).
  const bool has_tokenizer = !o.tokenizer.empty() && fs::exists(tokenizer_json_path(o.tokenizer));
  if (o.format == DataFormat::kTokens || (o.format == DataFormat::kPreference && !has_tokenizer)) {
    const MappedFile file(o.path);
    const LineEncoder encoder(o.format, nullptr, vocab_size, o.train_on_prompt);
    TokenizedDataset d = read_jsonl(text_of(file), name, encoder, o.seq_len, o.overlong,
                                    o.skip_bad_lines, o.verbose);
    if (o.verbose) log_stats(d, o.seq_len, "read", seconds());
    return d;
  }

  if (!has_tokenizer) {
    fail("{}: no tokenizer.json there, which data.format {} needs (data.tokenizer, --tokenizer)",
         o.tokenizer.string(), data_format_name(o.format));
  }
  const auto check_vocab = [&](const TokenizedDataset& d) {
    if (d.stats().max_id >= vocab_size) {
      fail("{}: token id {} from tokenizer {} is out of range for the model's vocab_size {}", name,
           d.stats().max_id, tokenizer_json_path(o.tokenizer).string(), vocab_size);
    }
  };
  const ChatTemplate* chat = data_chat_template(o);
  if (chat && o.verbose) log_chat_template(o, *chat, name);
  fs::path cache;
  uint64_t key = 0;
  if (o.use_cache) {
    key = data_cache_key(o);
    cache = cache_path_for(o, key);
    if (fs::exists(cache)) {
      std::string why;
      if (std::optional<TokenizedDataset> d = open_token_cache(cache, key, name, &why)) {
        check_vocab(*d);
        d->set_cache_hit(true);
        if (o.verbose) {
          KILN_LOG_INFO("data cache hit: {}", cache.string());
          log_stats(*d, o.seq_len, "cache", seconds());
        }
        return std::move(*d);
      }
      KILN_LOG_WARN("data cache {} is unusable ({}); rebuilding it", cache.string(), why);
    }
  }

  const Tokenizer tokenizer = Tokenizer::load(o.tokenizer);
  const MappedFile file(o.path);
  const LineEncoder encoder(o.format, &tokenizer, vocab_size, o.train_on_prompt, chat,
                            {.enable_thinking = o.enable_thinking});
  TokenizedDataset d =
      read_jsonl(text_of(file), name, encoder, o.seq_len, o.overlong, o.skip_bad_lines, o.verbose);
  check_vocab(d);
  if (o.use_cache) {
    try {
      fs::create_directories(cache.parent_path());
      write_token_cache(cache, key, d);
      std::string why;
      std::optional<TokenizedDataset> mapped = open_token_cache(cache, key, name, &why);
      KILN_CHECK(mapped.has_value(), "{}: the cache just written is unusable: {}", cache.string(),
                 why);
      d = std::move(*mapped);
      if (o.verbose) KILN_LOG_INFO("data cache written: {}", cache.string());
    } catch (const std::exception& e) {
      KILN_LOG_WARN("cannot write data cache {} ({}); continuing without it", cache.string(),
                    e.what());
    }
  }
  if (o.verbose) {
    log_stats(d, o.seq_len, fmt::format("tokenized with {} threads", omp_get_max_threads()).c_str(),
              seconds());
  }
  return d;
}

}  // namespace kiln
