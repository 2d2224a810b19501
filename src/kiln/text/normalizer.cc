#include "kiln/text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "kiln/base/error.h"
#include "kiln/text/utf8.h"

namespace kiln::text {
namespace {

// True when NFC can never change `cp` nor combine it with what comes before it: a starter
// (combining class 0) without a canonical decomposition that is never the second half of a
// canonical composition. A boundary just before such a character splits NFC: NFC(a + b) =
// NFC(a) + NFC(b). Hangul syllables decompose and recompose algorithmically to themselves;
// medial vowel and final consonant jamo (U+1161..U+1175, U+11A8..U+11C2) compose with what
// precedes them, but utf8proc's tables do not mark them, hence the explicit ranges.
bool is_boundary_before(char32_t cp) {
  if (cp < 0x80) return true;
  if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) return false;
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  const bool canonical_decomposition = p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0;
  const bool second_of_pair = p->comb_index != UINT16_MAX && p->comb_index >= 0x8000;
  return p->combining_class == 0 && !canonical_decomposition && !second_of_pair;
}

void append_utf8proc_nfc(std::string_view s, std::string& out) {
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
      &dst, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    std::free(dst);
    fail("NFC normalisation failed: {}", utf8proc_errmsg(n));
  }
  out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  std::free(dst);
}

}  // namespace

void append_nfc(std::string_view s, std::string& out) {
  size_t copied = 0;  // s[0, copied) is in `out` already
  size_t prev = 0;    // start of the character before s[i]
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      prev = i++;
      continue;
    }
    const size_t at = i;
    if (is_boundary_before(next_code_point(s, i))) {
      prev = at;
      continue;
    }
    // The stretch to normalise: from the character before (it may be the base a combining
    // mark attaches to) up to the next boundary.
    const size_t begin = at > copied ? prev : copied;
    size_t end = i;
    while (end < s.size()) {
      size_t next = end;
      if (is_boundary_before(next_code_point(s, next))) break;
      end = next;
    }
    out.append(s.substr(copied, begin - copied));
    append_utf8proc_nfc(s.substr(begin, end - begin), out);
    copied = i = end;
  }
  out.append(s.substr(copied));
}

}  // namespace kiln::text
