// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord framing uses it. Debian
// bookworm packages no C/C++ CRC-32C library (libcrc32c-dev arrives in trixie), so this is the
// table-driven reference; the checks against RFC 3720's vectors are in tests/base.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kiln {

uint32_t crc32c(std::string_view data);

// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8, so a CRC of data that itself
// holds CRCs stays well distributed.
uint32_t masked_crc32c(std::string_view data);

}  // namespace kiln
