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

// The sampled fingerprint reads exactly its blocks: the first at the range's start, the last
// ending at its end, evenly between; a range shorter than one block is read once, whole.
TEST(Checksum, SampledRangeHashesItsBlocksAndNothingElse) {
  const fs::path p = fs::temp_directory_path() / ("kiln_sampled_" + std::to_string(::getpid()));
  std::string data(1000, 'a');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>('a' + i % 26);
  write_file_atomic(p, data);
  const auto sampled = [&](uint64_t begin, uint64_t end, int blocks, size_t block) {
    Xxh3Stream h;
    hash_sampled_range(h, p, begin, end, blocks, block);
    return h.digest();
  };
  // Three blocks of 10 over [100, 900): at 100, 495 and 890.
  const std::string expect = data.substr(100, 10) + data.substr(495, 10) + data.substr(890, 10);
  EXPECT_EQ(sampled(100, 900, 3, 10), (FileDigest{30, xxh3_64(expect)}));
  EXPECT_EQ(sampled(0, 1000, 2, 4096), (FileDigest{1000, xxh3_64(data)}));
  EXPECT_EQ(sampled(5, 5, 2, 10).bytes, 0u);
  // A byte between the blocks is not seen; one inside a block is.
  data[300] = 'Z';
  write_file_atomic(p, data);
  EXPECT_EQ(sampled(100, 900, 3, 10).xxh3, xxh3_64(expect));
  data[497] = 'Z';
  write_file_atomic(p, data);
  EXPECT_NE(sampled(100, 900, 3, 10).xxh3, xxh3_64(expect));
  EXPECT_THROW(sampled(0, 2000, 2, 10), Error);  // past the end of the file
  fs::remove(p);
  EXPECT_THROW(sampled(0, 10, 2, 10), Error);
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
