#include "kiln/text/bpe.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>

namespace kiln::text {
namespace {

// Pieces longer than this are rarely repeated; caching them would only evict useful entries.
constexpr size_t kMaxCachedPiece = 128;
// A thread's cache is dropped whole when it grows past this many pieces or ids.
constexpr size_t kMaxCacheEntries = 1 << 17;
constexpr size_t kMaxCacheIds = 1 << 21;

struct PieceHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// A per-thread memo of piece -> ids. Per thread, not shared, so that encode() stays lock-free
// when many threads tokenize a dataset; a thread serves one model at a time and starts afresh
// when it sees another (owner ids are never reused, unlike addresses). It holds at most
// kMaxCacheEntries pieces (some 15 MB), freed when the thread ends.
struct ThreadCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, PieceHash, std::equal_to<>> map;
  std::vector<int32_t> ids;
  void reset(uint64_t new_owner) {
    owner = new_owner;
    map.clear();
    ids.clear();
  }
};

ThreadCache& thread_cache() {
  thread_local ThreadCache cache;
  return cache;
}

// A binary min-heap of candidates.
class HeapQueue {
 public:
  void add(uint64_t k) { v_.push_back(k); }
  void start() { std::make_heap(v_.begin(), v_.end(), std::greater<>()); }
  void push(uint64_t k) {
    v_.push_back(k);
    std::push_heap(v_.begin(), v_.end(), std::greater<>());
  }
  bool empty() const { return v_.empty(); }
  uint64_t pop() {
    std::pop_heap(v_.begin(), v_.end(), std::greater<>());
    const uint64_t k = v_.back();
    v_.pop_back();
    return k;
  }

 private:
  std::vector<uint64_t> v_;
};

// A radix heap: a min-queue for keys that never go below the last one taken, which is the case
// when the merges are well ordered (see Bpe). Key k sits in the bucket of the highest bit where
// it differs from the last key taken; taking from an empty bucket 0 redistributes the lowest
// non-empty bucket. Far cheaper than a binary heap's sifting for the long pieces it serves.
class RadixQueue {
 public:
  void add(uint64_t k) { push(k); }
  void start() {}
  void push(uint64_t k) {
    buckets_[bucket(k)].push_back(k);
    ++size_;
  }
  bool empty() const { return size_ == 0; }
  uint64_t pop() {
    if (buckets_[0].empty()) {
      size_t i = 1;
      while (buckets_[i].empty()) ++i;
      std::vector<uint64_t>& b = buckets_[i];
      last_ = *std::min_element(b.begin(), b.end());
      for (const uint64_t k : b) buckets_[bucket(k)].push_back(k);
      b.clear();
    }
    const uint64_t k = buckets_[0].back();
    buckets_[0].pop_back();
    --size_;
    return k;
  }

 private:
  size_t bucket(uint64_t k) const {
    return k == last_ ? 0 : 64 - static_cast<size_t>(__builtin_clzll(k ^ last_));
  }
  uint64_t last_ = 0;
  size_t size_ = 0;
  std::array<std::vector<uint64_t>, 65> buckets_;
};

uint64_t next_owner_id() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

}  // namespace

Bpe::Bpe(std::array<int32_t, 256> byte_ids, const std::vector<Merge>& merges, int32_t unk_id,
         bool fuse_unk, std::unordered_map<std::string, int32_t> whole_words)
    : byte_ids_(byte_ids),
      unk_id_(unk_id),
      fuse_unk_(fuse_unk),
      whole_words_(std::move(whole_words)),
      cache_owner_(next_owner_id()) {
  size_t size = 16;
  while (size < 2 * merges.size()) size *= 2;
  rules_.assign(size, Rule{kEmpty, 0, 0});
  mask_ = size - 1;
  for (size_t r = 0; r < merges.size(); ++r) {
    const uint64_t k = key(merges[r].left, merges[r].right);
    size_t i = slot(k, mask_);
    while (rules_[i].key != kEmpty && rules_[i].key != k) i = (i + 1) & mask_;
    // A repeated pair keeps its first (lowest) rank, as in Hugging Face.
    if (rules_[i].key == kEmpty) rules_[i] = {k, static_cast<uint32_t>(r), merges[r].result};
  }
  // Well ordered: every merge ranks after each merge that makes one of its two parts, so a
  // merge only ever creates candidates of higher rank than its own, and the ranks taken never
  // go down (true of merges learnt by BPE training, as Qwen's are).
  std::unordered_map<int32_t, uint32_t> made_at;  // id -> the highest rank that makes it
  for (size_t r = 0; r < merges.size(); ++r) {
    uint32_t& at = made_at[merges[r].result];
    at = std::max(at, static_cast<uint32_t>(r) + 1);
  }
  for (size_t r = 0; r < merges.size() && well_ordered_; ++r) {
    for (const int32_t part : {merges[r].left, merges[r].right}) {
      const auto it = made_at.find(part);
      if (it != made_at.end() && it->second > r) well_ordered_ = false;
    }
  }
}

const Bpe::Rule* Bpe::find(int32_t a, int32_t b) const {
  const uint64_t k = key(a, b);
  for (size_t i = slot(k, mask_);; i = (i + 1) & mask_) {
    if (rules_[i].key == k) return &rules_[i];
    if (rules_[i].key == kEmpty) return nullptr;
  }
}

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1 && byte_ids_[static_cast<uint8_t>(piece[0])] >= 0) {
    out.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (piece.size() > kMaxCachedPiece) {
    encode_uncached(piece, out);
    return;
  }
  ThreadCache& cache = thread_cache();
  if (cache.owner != cache_owner_) cache.reset(cache_owner_);
  if (const auto it = cache.map.find(piece); it != cache.map.end()) {
    const auto [begin, count] = it->second;
    out.insert(out.end(), cache.ids.begin() + begin, cache.ids.begin() + begin + count);
    return;
  }
  const size_t first = out.size();
  encode_uncached(piece, out);
  if (cache.map.size() >= kMaxCacheEntries || cache.ids.size() >= kMaxCacheIds) {
    cache.reset(cache_owner_);
  }
  const auto begin = static_cast<uint32_t>(cache.ids.size());
  cache.ids.insert(cache.ids.end(), out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  cache.map.emplace(std::string(piece), std::pair<uint32_t, uint32_t>{
                                            begin, static_cast<uint32_t>(out.size() - first)});
}

void Bpe::encode_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  if (!whole_words_.empty()) {
    if (const auto it = whole_words_.find(std::string(piece)); it != whole_words_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Symbols as a doubly linked list over the piece's bytes; a merged-away symbol gets id -1.
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  for (const char c : piece) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      ids.push_back(id);
    } else if (unk_id_ >= 0 && !(fuse_unk_ && !ids.empty() && ids.back() == unk_id_)) {
      ids.push_back(unk_id_);
    }
  }
  const auto n = static_cast<int32_t>(ids.size());
  if (n <= 1) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  if (well_ordered_ && n >= 32) {
    merge_all<RadixQueue>(ids, out);
  } else {
    merge_all<HeapQueue>(ids, out);
  }
}

template <typename Queue>
void Bpe::merge_all(std::vector<int32_t>& ids, std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // Long pieces (runs of spaces, of one letter, of digits in some vocabularies) look the same
  // few pairs up again and again: a small direct-mapped memo keeps those in L1 instead of
  // probing the multi-megabyte rule table each time.
  struct Memo {
    uint64_t key = kEmpty;
    const Rule* rule = nullptr;
  };
  std::vector<Memo> memo(n >= 64 ? 256 : 0);
  const auto lookup = [&](int32_t a, int32_t b) -> const Rule* {
    if (memo.empty()) return find(a, b);
    const uint64_t k = key(a, b);
    Memo& m = memo[(k * 0x9E3779B97F4A7C15ull) >> 56];
    if (m.key != k) m = {k, find(a, b)};
    return m.rule;
  };
  // Candidates are (rank << 32 | position), taken lowest first: the lowest rank, the leftmost
  // among equals. A candidate is stale once either symbol has changed; as symbols only ever
  // grow, the pair now at its position having the same rank means it is still the same pair.
  const auto candidate = [](uint32_t rank, int32_t pos) {
    return (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(pos);
  };
  Queue queue;
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const Rule* r = lookup(ids[i], ids[i + 1])) queue.add(candidate(r->rank, i));
  }
  queue.start();
  const auto consider = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const Rule* r = lookup(ids[pos], ids[next[pos]])) queue.push(candidate(r->rank, pos));
  };
  while (!queue.empty()) {
    const uint64_t c = queue.pop();
    const auto pos = static_cast<int32_t>(c & 0xFFFFFFFFu);
    const int32_t right = next[pos];
    if (ids[pos] < 0 || right < 0) continue;
    const Rule* r = lookup(ids[pos], ids[right]);
    if (!r || r->rank != static_cast<uint32_t>(c >> 32)) continue;
    ids[pos] = r->result;
    ids[right] = -1;
    next[pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = pos;
    consider(prev[pos]);
    consider(pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
}

}  // namespace kiln::text
