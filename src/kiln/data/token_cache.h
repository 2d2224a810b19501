// The tokenized cache: one file per (data file, tokenizer, settings), memory-mapped for training.
// Little-endian, every array aligned to its element size:
//
//   header   128 bytes   CacheHeader below
//   offsets  (N+1) u64   example i = tokens [offsets[i], offsets[i+1]), offsets[0] = 0,
//                        strictly increasing, offsets[N] = T
//   ids      (T) i32     input ids
//   labels   (T) i32     unshifted labels, kIgnoreIndex where no loss
//
// The header's checksum covers the header (with the checksum field zero) and every array, so a
// truncated, extended or bit-flipped file is refused and rebuilt rather than trained on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "kiln/data/text_dataset.h"

namespace kiln {

// 2: the data file's length and XXH3-64 (DataStats::source) in the header.
// 3: text and completion lines begin with the tokenizer's post-processor tokens (Llama 3's
//    <|begin_of_text|>), and a chat's template is the model's or data.template.
inline constexpr uint32_t kTokenCacheVersion = 3;

struct CacheHeader {
  char magic[8];          // "KILNTOK\n"
  uint32_t version;       // kTokenCacheVersion
  uint32_t header_bytes;  // sizeof(CacheHeader)
  uint64_t key;           // data_cache_key() of the settings it was built with
  uint64_t num_examples;  // N
  uint64_t num_tokens;    // T
  uint64_t lines, targets, truncated, dropped, skipped, no_target;  // DataStats
  int64_t max_id;
  uint64_t checksum;
  uint64_t source_bytes, source_xxh3;  // DataStats::source
  uint64_t reserved[1];
};
static_assert(sizeof(CacheHeader) == 128);

// A 64-bit hash of bytes (not cryptographic: it names cache files and detects corruption).
uint64_t hash_bytes(const void* data, size_t n, uint64_t seed = 0);

// Writes `data` to `path` atomically (temporary name, fsync, rename).
void write_token_cache(const fs::path& path, uint64_t key, const TokenizedDataset& data);

// Maps `path` if it is a valid cache built with `key`; otherwise nullopt and, in `why`, the
// reason ("bad magic", "size 1234 does not match its header (expected 5678)", ...). `what` names
// the data in the dataset's messages.
std::optional<TokenizedDataset> open_token_cache(const fs::path& path, uint64_t key,
                                                 const std::string& what, std::string* why);

}  // namespace kiln
