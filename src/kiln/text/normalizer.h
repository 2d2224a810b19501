// Unicode NFC, the normaliser of the Qwen2 family's tokenizer.json, via utf8proc.
#pragma once

#include <string>
#include <string_view>

namespace kiln::text {

// Appends NFC(s) to `out`. `s` must be valid UTF-8. Only the stretches that NFC could change are
// handed to utf8proc; the rest (ASCII, CJK, most scripts) is copied as it is.
void append_nfc(std::string_view s, std::string& out);

inline std::string nfc(std::string_view s) {
  std::string out;
  append_nfc(s, out);
  return out;
}

}  // namespace kiln::text
