// A fresh model fitted to a tokenizer (`kiln init --tokenizer FILE`), so any preset becomes a
// model that a real tokenizer's ids fit and that stops where the tokenizer's chats end.
//
//   vocab_size    the tokenizer's vocabulary (one past its largest id, added tokens included)
//                 rounded up to a multiple of kVocabMultiple, as Qwen pads its embeddings
//                 (151,669 ids of the Qwen3 tokenizer -> 151,680 rows); the padding rows are
//                 never produced (kiln generate samples only ids the tokenizer has)
//   bos_token_id  tokenizer_config.json's bos_token beside tokenizer.json when it names one, else
//                 <|endoftext|> (Qwen's convention; kiln never prepends it)
//   eos_token_id  tokenizer_config.json's eos_token, else <|im_end|> (a chat's turn ends there),
//                 else <|endoftext|>
// A token the tokenizer lacks leaves its key out of config.json.
#pragma once

#include <cstdint>
#include <filesystem>

#include "kiln/base/json.h"

namespace kiln {

class Tokenizer;

inline constexpr int64_t kVocabMultiple = 128;

// `tokenizer_vocab` rounded up to a multiple of kVocabMultiple.
int64_t fitted_vocab_size(int64_t tokenizer_vocab);

// Sets (or removes) bos_token_id and eos_token_id of a config.json object as above;
// `tokenizer_json` is the file `tokenizer` was loaded from.
void set_special_token_ids(Json& config, const Tokenizer& tokenizer,
                           const std::filesystem::path& tokenizer_json);

}  // namespace kiln
