// XXH3-64 as checkpoint manifests use it: the published value of the empty input, streaming in
// any split equal to one call, the writer's digest equal to the reader's, and the hex form.
#include "kiln/base/checksum.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "kiln/base/error.h"
#include "kiln/base/file.h"

namespace kiln {
namespace {

TEST(Checksum, Xxh3OfTheEmptyInputIsThePublishedValue) {
  EXPECT_EQ(xxh3_64(""), 0x2D06800538D394C2ull);
  EXPECT_EQ(Xxh3Stream().digest(), (FileDigest{0, 0x2D06800538D394C2ull}));
}

TEST(Checksum, StreamingInAnySplitEqualsOneCall) {
  std::string data;
  for (int i = 0; i < 5000; ++i) data.push_back(static_cast<char>((i * 131) % 251));
  const uint64_t whole = xxh3_64(data);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{240}, size_t{4096}, data.size()}) {
    Xxh3Stream s;
    s.update(data.data(), cut);
    s.update(data.data() + cut, data.size() - cut);
    EXPECT_EQ(s.digest(), (FileDigest{data.size(), whole})) << "cut at " << cut;
  }
  std::string flipped = data;
  flipped[2500] ^= 0x10;
  EXPECT_NE(xxh3_64(flipped), whole);
}

TEST(Checksum, TheWritersDigestIsTheReaders) {
  const fs::path p = fs::temp_directory_path() / ("kiln_checksum_" + std::to_string(::getpid()));
  std::string data(9 << 20, 'k');  // over two of digest_file's read chunks
  data[7 << 20] = 'x';
  const FileDigest written = write_file_atomic(p, data);
  EXPECT_EQ(written, (FileDigest{data.size(), xxh3_64(data)}));
  EXPECT_EQ(digest_file(p), written);
  fs::remove(p);
  EXPECT_THROW(digest_file(p), Error);
}

TEST(Checksum, HexRoundTripsAndRejectsAnythingElse) {
  EXPECT_EQ(xxh3_hex(0x00ab00000000cd01ull), "00ab00000000cd01");
  EXPECT_EQ(parse_xxh3_hex("00ab00000000cd01"), 0x00ab00000000cd01ull);
  for (const char* bad : {"", "00ab00000000cd0", "00ab00000000cd011", "00AB00000000CD01",
                          "00ab00000000cd0g", "-0ab00000000cd01"}) {
    EXPECT_FALSE(parse_xxh3_hex(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace kiln
