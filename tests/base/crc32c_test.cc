// CRC-32C against published vectors (RFC 3720 B.4; the "123456789" check value) and TFRecord's
// mask.
#include "kiln/base/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln {
namespace {

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c(""), 0x00000000u);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending += static_cast<char>(i);
    descending += static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc32c(descending), 0x113FDB5Cu);
}

TEST(Crc32c, MaskRotatesAndAdds) {
  const uint32_t c = crc32c("123456789");
  EXPECT_EQ(masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
  EXPECT_EQ(masked_crc32c(""), 0xa282ead8u);
}

}  // namespace
}  // namespace kiln
