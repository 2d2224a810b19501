#include "kiln/data/token_cache.h"

#include <bit>
#include <cstring>

#include "kiln/base/error.h"

namespace kiln {

static_assert(std::endian::native == std::endian::little, "the token cache is little-endian");

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'T', 'O', 'K', '\n'};

uint64_t finalize(uint64_t z) {  // splitmix64's finaliser: every input bit moves every output bit
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t checksum(const CacheHeader& header, std::span<const uint64_t> offsets,
                  std::span<const int32_t> ids, std::span<const int32_t> labels) {
  CacheHeader h = header;
  h.checksum = 0;
  uint64_t c = hash_bytes(&h, sizeof h);
  c = hash_bytes(offsets.data(), offsets.size_bytes(), c);
  c = hash_bytes(ids.data(), ids.size_bytes(), c);
  return hash_bytes(labels.data(), labels.size_bytes(), c);
}

}  // namespace

uint64_t hash_bytes(const void* data, size_t n, uint64_t seed) {
  constexpr uint64_t k1 = 0x9E3779B97F4A7C15ull, k2 = 0xC2B2AE3D27D4EB4Full;
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = finalize(seed ^ k1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = std::rotl(h ^ (w * k1), 29) * k2;
  }
  uint64_t tail = 0;
  if (i < n) std::memcpy(&tail, p + i, n - i);
  h = std::rotl(h ^ (tail * k1), 29) * k2;
  return finalize(h ^ n);
}

void write_token_cache(const fs::path& path, uint64_t key, const TokenizedDataset& data) {
  const DataStats& s = data.stats();
  CacheHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kTokenCacheVersion;
  h.header_bytes = sizeof(CacheHeader);
  h.key = key;
  h.num_examples = data.size();
  h.num_tokens = data.input_ids().size();
  h.lines = static_cast<uint64_t>(s.lines);
  h.targets = static_cast<uint64_t>(s.targets);
  h.truncated = static_cast<uint64_t>(s.truncated);
  h.dropped = static_cast<uint64_t>(s.dropped);
  h.skipped = static_cast<uint64_t>(s.skipped);
  h.no_target = static_cast<uint64_t>(s.no_target);
  h.max_id = s.max_id;
  h.source_bytes = s.source.bytes;
  h.source_xxh3 = s.source.xxh3;
  h.checksum = checksum(h, data.offsets(), data.input_ids(), data.labels());
  AtomicFileWriter w(path);
  w.write(&h, sizeof h);
  w.write(data.offsets().data(), data.offsets().size_bytes());
  w.write(data.input_ids().data(), data.input_ids().size_bytes());
  w.write(data.labels().data(), data.labels().size_bytes());
  w.commit();
}

std::optional<TokenizedDataset> open_token_cache(const fs::path& path, uint64_t key,
                                                 const std::string& what, std::string* why) {
  const auto bad = [&](std::string reason) -> std::optional<TokenizedDataset> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  MappedFile map;
  try {
    map = MappedFile(path);
  } catch (const Error& e) {
    return bad(e.what());
  }
  const size_t size = map.size();
  CacheHeader h;
  if (size < sizeof h) return bad(fmt::format("{} bytes is shorter than its header", size));
  std::memcpy(&h, map.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return bad("not a kiln token cache");
  if (h.version != kTokenCacheVersion) {
    return bad(fmt::format("format version {}, expected {}", h.version, kTokenCacheVersion));
  }
  if (h.header_bytes != sizeof h) return bad(fmt::format("header size {}", h.header_bytes));
  if (h.key != key) return bad("built with other settings");
  // Bound the counts by the file size before multiplying, so nothing overflows.
  if (h.num_examples == 0 || h.num_examples >= size / 8 || h.num_tokens >= size / 8) {
    return bad(fmt::format("implausible counts ({} examples, {} tokens) for {} bytes",
                           h.num_examples, h.num_tokens, size));
  }
  const uint64_t expected = sizeof h + 8 * (h.num_examples + 1) + 8 * h.num_tokens;
  if (size != expected) {
    return bad(fmt::format("size {} does not match its header (expected {})", size, expected));
  }
  const uint8_t* p = map.data() + sizeof h;
  std::span<const uint64_t> offsets(reinterpret_cast<const uint64_t*>(p), h.num_examples + 1);
  p += offsets.size_bytes();
  std::span<const int32_t> ids(reinterpret_cast<const int32_t*>(p), h.num_tokens);
  p += ids.size_bytes();
  std::span<const int32_t> labels(reinterpret_cast<const int32_t*>(p), h.num_tokens);
  if (checksum(h, offsets, ids, labels) != h.checksum) return bad("checksum mismatch");
  if (offsets.front() != 0 || offsets.back() != h.num_tokens) return bad("bad offsets");
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    if (offsets[i + 1] <= offsets[i]) return bad(fmt::format("bad offsets at example {}", i));
  }
  DataStats s;
  s.lines = static_cast<int64_t>(h.lines);
  s.examples = static_cast<int64_t>(h.num_examples);
  s.tokens = static_cast<int64_t>(h.num_tokens);
  s.targets = static_cast<int64_t>(h.targets);
  s.truncated = static_cast<int64_t>(h.truncated);
  s.dropped = static_cast<int64_t>(h.dropped);
  s.skipped = static_cast<int64_t>(h.skipped);
  s.no_target = static_cast<int64_t>(h.no_target);
  s.max_id = h.max_id;
  s.source = {h.source_bytes, h.source_xxh3};
  return TokenizedDataset(std::move(map), offsets, ids, labels, s, what);
}

}  // namespace kiln
