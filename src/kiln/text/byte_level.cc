#include "kiln/text/byte_level.h"

#include <array>

#include "kiln/text/utf8.h"

namespace kiln::text {
namespace {

struct Tables {
  std::array<char32_t, 256> to_cp{};
  std::array<int16_t, 324> to_byte{};  // code points 0..323 cover the whole alphabet
};

constexpr bool printable(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr Tables make_tables() {
  Tables t;
  for (auto& x : t.to_byte) x = -1;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    t.to_cp[b] = cp;
    t.to_byte[cp] = static_cast<int16_t>(b);
  }
  return t;
}

constexpr Tables kTables = make_tables();

}  // namespace

char32_t byte_to_code_point(uint8_t b) { return kTables.to_cp[b]; }

int code_point_to_byte(char32_t cp) {
  return cp < kTables.to_byte.size() ? kTables.to_byte[cp] : -1;
}

void append_byte_level(std::string& out, std::string_view bytes) {
  for (const char c : bytes) append_utf8(out, kTables.to_cp[static_cast<uint8_t>(c)]);
}

bool decode_byte_level(std::string_view s, std::string& out) {
  if (find_invalid_utf8(s) != std::string_view::npos) return false;
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const int b = code_point_to_byte(next_code_point(s, i));
    if (b < 0) return false;
    out += static_cast<char>(b);
  }
  return true;
}

}  // namespace kiln::text
