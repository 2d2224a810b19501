// UTF-8 helpers for the tokenizer: validation, one code point at a time, and the lossy repair
// that turns decoded token bytes back into text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::text {

// The offset of the first byte that does not start a well-formed UTF-8 sequence (overlongs,
// surrogates and code points past U+10FFFF are ill-formed), or npos when `s` is valid.
size_t find_invalid_utf8(std::string_view s);

// Decodes the code point starting at s[i] (which must be valid UTF-8) and advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);

void append_utf8(std::string& out, char32_t cp);

// Replaces every ill-formed subsequence with U+FFFD, one per maximal subpart (the WHATWG and
// Unicode recommended practice, which Rust's String::from_utf8_lossy and JavaScript's
// TextDecoder both follow), so decoding matches Hugging Face's.
std::string to_valid_utf8(std::string_view bytes);

// `s` made fit for a one-line message: control characters escaped (\n, \u0007, ...), ill-formed
// UTF-8 replaced, and cut to about `max` bytes with "...".
std::string printable(std::string_view s, size_t max = 60);

}  // namespace kiln::text
