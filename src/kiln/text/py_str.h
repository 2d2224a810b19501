// The Python string methods chat templates call (Jinja runs them on Python str), on UTF-8 text.
#pragma once

#include <string>
#include <string_view>

namespace kiln::text {

// str.lstrip(chars) / rstrip(chars) / strip(chars) for ASCII `chars`.
std::string_view py_lstrip(std::string_view s, std::string_view chars);
std::string_view py_rstrip(std::string_view s, std::string_view chars);
std::string_view py_strip(std::string_view s, std::string_view chars);
// Jinja's `trim` filter: str.strip() with no argument, which strips every character Python's
// str.isspace() accepts (ASCII whitespace, \x1c-\x1f, U+0085, U+00A0, U+1680, U+2000-U+200A,
// U+2028, U+2029, U+202F, U+205F, U+3000).
std::string_view py_trim(std::string_view s);
// s.split(sep)[0] and s.split(sep)[-1].
std::string_view py_split_first(std::string_view s, std::string_view sep);
std::string_view py_split_last(std::string_view s, std::string_view sep);

}  // namespace kiln::text
