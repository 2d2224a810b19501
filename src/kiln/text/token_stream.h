// Streaming detokenisation: text for each generated token as soon as it is complete. A byte-level
// BPE token may end in the middle of a UTF-8 character (an emoji can span three tokens), so the
// bytes of an unfinished character are held back until the tokens that finish it arrive. The
// pieces, joined, equal Tokenizer::decode of all the ids.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/text/tokenizer.h"

namespace kiln {

class TokenStream {
 public:
  // `tokenizer` must outlive the stream.
  explicit TokenStream(const Tokenizer& tokenizer, bool skip_special = false);

  // The text that `id` completes (often empty or one token's text; ill-formed bytes become
  // U+FFFD). An id outside the vocabulary is a kiln::Error.
  std::string push(int32_t id);
  // Whatever was held back (an unfinished character becomes U+FFFD); the stream starts afresh.
  std::string finish();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;  // bytes not yet returned: at most an unfinished character
};

}  // namespace kiln
