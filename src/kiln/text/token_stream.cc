#include "kiln/text/token_stream.h"

#include "kiln/base/error.h"
#include "kiln/text/byte_level.h"
#include "kiln/text/utf8.h"

namespace kiln {

namespace {

// Length of the UTF-8 sequence a lead byte starts (2 to 4), or 0 for anything else.
size_t sequence_length(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// True when `s` (shorter than its lead byte announces) can still become a well-formed sequence:
// the second byte's range depends on the lead (no overlongs, surrogates or code points past
// U+10FFFF), later bytes are plain continuation bytes.
bool is_unfinished_sequence(std::string_view s) {
  const uint8_t lead = static_cast<uint8_t>(s[0]);
  const size_t len = sequence_length(lead);
  if (len == 0 || s.size() >= len) return false;
  for (size_t i = 1; i < s.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    uint8_t lo = 0x80, hi = 0xBF;
    if (i == 1) {
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    }
    if (b < lo || b > hi) return false;
  }
  return true;
}

}  // namespace

TokenStream::TokenStream(const Tokenizer& tokenizer, bool skip_special)
    : tok_(tokenizer), skip_special_(skip_special) {}

std::string TokenStream::push(int32_t id) {
  const std::optional<std::string> spelling = tok_.token_str(id);
  if (!spelling) {
    fail("decode: id {} is not in the vocabulary of {} (size {})", id, tok_.source(),
         tok_.vocab_size());
  }
  if (skip_special_ && tok_.is_special(id)) return {};
  // A token's bytes, as Tokenizer::decode joins them: an added token is its own text, a model
  // token its byte-level spelling read back as bytes.
  std::string bytes;
  if (tok_.is_added(id) || !text::decode_byte_level(*spelling, bytes)) bytes = *spelling;
  pending_ += bytes;

  // Hold back the last character when it is unfinished; it starts at one of the last 3 bytes.
  size_t keep = pending_.size();
  for (size_t back = 1; back <= 3 && back <= pending_.size(); ++back) {
    const size_t at = pending_.size() - back;
    if ((static_cast<uint8_t>(pending_[at]) & 0xC0) != 0x80) {  // not a continuation byte
      if (is_unfinished_sequence(std::string_view(pending_).substr(at))) keep = at;
      break;
    }
  }
  // Splitting before a lead byte never changes how the bytes before it are repaired, so the
  // pieces join to decode()'s text.
  std::string out = text::to_valid_utf8(std::string_view(pending_).substr(0, keep));
  pending_.erase(0, keep);
  return out;
}

std::string TokenStream::finish() {
  std::string out = text::to_valid_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace kiln
