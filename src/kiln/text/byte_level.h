// GPT-2's byte-level alphabet (bytes_to_unicode): every byte stands for one printable code
// point, so any byte string spells a token in a vocabulary of printable strings. Bytes that are
// printable Latin-1 (! to ~, ¡ to ¬, ® to ÿ) map to themselves; the other 68 (controls, space,
// soft hyphen, ...) map to U+0100 + their rank among them: space is U+0120 'Ġ', \n U+010A 'Ċ'.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::text {

char32_t byte_to_code_point(uint8_t b);

// The byte a code point stands for, or -1 when it is not in the alphabet.
int code_point_to_byte(char32_t cp);

// Appends the byte-level spelling of `bytes` (each byte as its code point, in UTF-8).
void append_byte_level(std::string& out, std::string_view bytes);

// The bytes a byte-level string spells; false (and `out` unspecified) when `s` holds a code
// point outside the alphabet or is not valid UTF-8.
bool decode_byte_level(std::string_view s, std::string& out);

}  // namespace kiln::text
