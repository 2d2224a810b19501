#include "kiln/base/checksum.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "kiln/base/error.h"

namespace kiln {

namespace {

constexpr size_t kReadChunk = size_t{4} << 20;

}  // namespace

void Xxh3Stream::Free::operator()(XXH3_state_s* s) const { XXH3_freeState(s); }

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  KILN_CHECK(state_ != nullptr, "XXH3_createState");
  XXH3_64bits_reset(state_.get());
}

Xxh3Stream::~Xxh3Stream() = default;

void Xxh3Stream::update(const void* data, size_t n) {
  XXH3_64bits_update(state_.get(), data, n);
  bytes_ += n;
}

FileDigest Xxh3Stream::digest() const { return {bytes_, XXH3_64bits_digest(state_.get())}; }

uint64_t xxh3_64(std::string_view data) { return XXH3_64bits(data.data(), data.size()); }

FileDigest digest_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path.string(), std::strerror(errno));
  Xxh3Stream h;
  std::vector<char> buf(kReadChunk);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail("{}: read failed: {}", path.string(), std::strerror(err));
    }
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return h.digest();
}

void hash_sampled_range(Xxh3Stream& h, const fs::path& path, uint64_t begin, uint64_t end,
                        int blocks, size_t block_bytes) {
  KILN_CHECK(blocks >= 2 && begin <= end, "{}: blocks {} range [{}, {})", path.string(), blocks,
             begin, end);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path.string(), std::strerror(errno));
  const uint64_t n = end - begin;
  const size_t block = static_cast<size_t>(std::min<uint64_t>(block_bytes, n));
  const int count = n <= block_bytes ? 1 : blocks;
  std::vector<char> buf(block);
  for (int i = 0; i < count; ++i) {
    const uint64_t at = count == 1 ? begin : begin + (n - block) * i / (count - 1);
    const ssize_t got = ::pread(fd, buf.data(), block, static_cast<off_t>(at));
    if (got != static_cast<ssize_t>(block)) {
      const int err = got < 0 ? errno : EIO;
      ::close(fd);
      fail("{}: read of {} bytes at {} failed: {}", path.string(), block, at, std::strerror(err));
    }
    h.update(buf.data(), block);
  }
  ::close(fd);
}

std::string xxh3_hex(uint64_t h) { return fmt::format("{:016x}", h); }

std::optional<uint64_t> parse_xxh3_hex(std::string_view s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t h = 0;
  for (char c : s) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (d < 0) return std::nullopt;
    h = (h << 4) | static_cast<uint64_t>(d);
  }
  return h;
}

}  // namespace kiln
