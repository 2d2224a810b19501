// The byte-level BPE model: initial symbols are the bytes of a piece (as their byte-level
// alphabet tokens), then the ranked merges apply, lowest rank first and leftmost first among
// equals, exactly as Hugging Face tokenizers' BPE::merge_word does.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::text {

struct Merge {
  int32_t left, right;  // the ids merged
  int32_t result;       // the id of their concatenation
};

class Bpe {
 public:
  // byte_ids[b]: the id of byte b's alphabet token, or -1 when the vocabulary lacks it (such a
  // byte becomes unk_id, or is dropped when there is no unk token, as in Hugging Face).
  // merges: in rank order. whole_words: for ignore_merges, the id of each piece that is in the
  // vocabulary as a whole, keyed by its raw bytes (empty otherwise).
  Bpe(std::array<int32_t, 256> byte_ids, const std::vector<Merge>& merges, int32_t unk_id,
      bool fuse_unk, std::unordered_map<std::string, int32_t> whole_words);

  // Appends the ids of one piece (raw bytes, not yet in the byte-level spelling). Thread-safe:
  // recent pieces are memoised in a per-thread cache.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  // The same without the cache (exposed for tests and the benchmark).
  void encode_uncached(std::string_view piece, std::vector<int32_t>& out) const;

  // Whether every merge ranks after the merges that make its parts (see bpe.cc).
  bool well_ordered() const { return well_ordered_; }

 private:
  // The merge rules in an open-addressing table (linear probing, power-of-two size, at most half
  // full): one probe is usually one cache miss, where std::unordered_map takes two or three.
  struct Rule {
    uint64_t key;  // (left << 32) | right; kEmpty marks a free slot
    uint32_t rank;
    int32_t result;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static size_t slot(uint64_t key, size_t mask) {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
  }
  const Rule* find(int32_t a, int32_t b) const;
  template <typename Queue>
  void merge_all(std::vector<int32_t>& ids, std::vector<int32_t>& out) const;

  std::array<int32_t, 256> byte_ids_;
  std::vector<Rule> rules_;
  size_t mask_ = 0;
  int32_t unk_id_;
  bool fuse_unk_;
  std::unordered_map<std::string, int32_t> whole_words_;
  bool well_ordered_ = true;
  uint64_t cache_owner_;  // tells this model's entries from another's in a thread's cache
};

}  // namespace kiln::text
