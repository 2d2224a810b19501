#include "kiln/text/py_str.h"

#include "kiln/text/utf8.h"

namespace kiln::text {

std::string_view py_lstrip(std::string_view s, std::string_view chars) {
  const size_t b = s.find_first_not_of(chars);
  return b == std::string_view::npos ? std::string_view() : s.substr(b);
}

std::string_view py_rstrip(std::string_view s, std::string_view chars) {
  const size_t e = s.find_last_not_of(chars);
  return e == std::string_view::npos ? std::string_view() : s.substr(0, e + 1);
}

std::string_view py_strip(std::string_view s, std::string_view chars) {
  return py_rstrip(py_lstrip(s, chars), chars);
}

namespace {

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// The byte length of the whitespace character at s[i] (valid UTF-8), or 0.
size_t space_at(std::string_view s, size_t i) {
  size_t end = i;
  const char32_t c = next_code_point(s, end);
  return py_isspace(c) ? end - i : 0;
}

}  // namespace

std::string_view py_trim(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    const size_t n = space_at(s, b);
    if (n == 0) break;
    b += n;
  }
  s = s.substr(b);
  size_t e = s.size();
  while (e > 0) {
    size_t start = e - 1;  // back to the first byte of the last character
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (space_at(s, start) != e - start) break;
    e = start;
  }
  return s.substr(0, e);
}

std::string_view py_split_first(std::string_view s, std::string_view sep) {
  return s.substr(0, s.find(sep));
}

std::string_view py_split_last(std::string_view s, std::string_view sep) {
  const size_t at = s.rfind(sep);
  return at == std::string_view::npos ? s : s.substr(at + sep.size());
}

}  // namespace kiln::text
