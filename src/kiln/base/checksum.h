// File checksums: XXH3-64 (xxHash 0.8, Debian's libxxhash), the checksum checkpoint manifests
// record per file. Streaming, so a writer hashes its bytes as it writes them and never reads a
// large file back; digest_file() is the reader's side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

struct XXH3_state_s;

namespace kiln {

namespace fs = std::filesystem;

// A file's length and the XXH3-64 (seed 0) of all its bytes.
struct FileDigest {
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
  bool operator==(const FileDigest&) const = default;
};

// XXH3-64 over bytes fed in any number of pieces: the same value as xxh3_64 of their
// concatenation.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;

  void update(const void* data, size_t n);
  FileDigest digest() const;  // of everything fed so far

 private:
  struct Free {
    void operator()(XXH3_state_s* s) const;
  };
  std::unique_ptr<XXH3_state_s, Free> state_;
  uint64_t bytes_ = 0;
};

uint64_t xxh3_64(std::string_view data);

// Reads `path` in bounded chunks and digests it; throws kiln::Error naming the path when it
// cannot be opened or read.
FileDigest digest_file(const fs::path& path);

// A cheap fingerprint of a large file's bytes: feeds `h` with `blocks` (>= 2) blocks of
// `block_bytes` spread evenly over [begin, end) of `path`, the first at `begin` and the last
// ending at `end` (the whole range, once, when it is shorter than one block). A change outside
// the blocks goes unseen: for noticing a file replaced or edited in place, not for integrity.
// Throws kiln::Error naming the path when it cannot be read.
void hash_sampled_range(Xxh3Stream& h, const fs::path& path, uint64_t begin, uint64_t end,
                        int blocks, size_t block_bytes);

// 16 lowercase hex digits, as manifests record a checksum; parse_xxh3_hex is its inverse
// (nullopt unless exactly 16 hex digits).
std::string xxh3_hex(uint64_t h);
std::optional<uint64_t> parse_xxh3_hex(std::string_view s);

}  // namespace kiln
