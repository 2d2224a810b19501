#include "kiln/text/utf8.h"

#include <fmt/format.h>

namespace kiln::text {
namespace {

// The length of the longest prefix of s[i..] that could begin a well-formed sequence (the
// "maximal subpart"), and whether it is a complete one. Follows Table 3-7 of the Unicode
// standard: the second byte's range depends on the lead byte.
struct Scan {
  size_t len;
  bool complete;
};

Scan scan(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  if (c < 0x80) return {1, true};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return {1, false};
  }
  size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= s.size()) return {k, false};
    const uint8_t x = b(k);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (x < l || x > h) return {k, false};
  }
  return {k, true};
}

}  // namespace

size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // Skip ASCII eight bytes at a time: most text is mostly ASCII.
    while (i + 8 <= s.size()) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const Scan r = scan(s, i);
    if (!r.complete) return i;
    i += r.len;
  }
  return std::string_view::npos;
}

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  char32_t cp;
  if (c < 0x80) {
    cp = c;
    i += 1;
  } else if (c < 0xE0) {
    cp = (char32_t{c & 0x1Fu} << 6) | (b(1) & 0x3Fu);
    i += 2;
  } else if (c < 0xF0) {
    cp = (char32_t{c & 0x0Fu} << 12) | (char32_t{b(1) & 0x3Fu} << 6) | (b(2) & 0x3Fu);
    i += 3;
  } else {
    cp = (char32_t{c & 0x07u} << 18) | (char32_t{b(1) & 0x3Fu} << 12) |
         (char32_t{b(2) & 0x3Fu} << 6) | (b(3) & 0x3Fu);
    i += 4;
  }
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string to_valid_utf8(std::string_view bytes) {
  const size_t bad = find_invalid_utf8(bytes);
  if (bad == std::string_view::npos) return std::string(bytes);
  std::string out(bytes.substr(0, bad));
  size_t i = bad;
  while (i < bytes.size()) {
    const Scan r = scan(bytes, i);
    if (r.complete) {
      out.append(bytes.substr(i, r.len));
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
    }
    i += r.len;
  }
  return out;
}

std::string printable(std::string_view s, size_t max) {
  const std::string valid = to_valid_utf8(s);
  std::string out;
  for (size_t i = 0; i < valid.size(); ++i) {
    const auto c = static_cast<uint8_t>(valid[i]);
    if (out.size() >= max && (c & 0xC0) != 0x80) {
      out += "...";
      break;
    }
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace kiln::text
