// A fresh model fitted to a tokenizer (`kiln init --tokenizer FILE`), so any preset becomes a
// model that a real tokenizer's ids fit, that renders chats with its family's template and that
// stops where those chats end.
//
//   vocab_size     the tokenizer's vocabulary (one past its largest id, added tokens included)
//                  rounded up to a multiple of kVocabMultiple, as Qwen pads its embeddings
//                  (151,669 ids of the Qwen3 tokenizer -> 151,680 rows); the padding rows are
//                  never produced (kiln generate samples only ids the tokenizer has)
//   chat template  --template when given; else the tokenizer's own (tokenizer_config.json or
//                  chat_template.jinja beside tokenizer.json), kept as it is; else the family's
//                  (family_chat_template)
//   bos_token_id   tokenizer_config.json's bos_token beside tokenizer.json when it names one,
//                  else the template's models' (chat_model_tokens: <|endoftext|> for Qwen, which
//                  kiln never prepends; <|begin_of_text|> for Llama 3)
//   eos_token_id   tokenizer_config.json's eos_token, else the template's models' (<|im_end|>,
//                  <|eot_id|>: a chat's turn ends there), else the first of their generation eos
//   generation_config.json  {bos_token_id, eos_token_id: the template's models' list (Llama
//                  3.1-Instruct's [128001, 128008, 128009]) with config.json's eos, pad_token_id}
// A token the tokenizer lacks leaves its key out (and is named in one warning).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/json.h"
#include "kiln/model/config.h"
#include "kiln/text/chat_template.h"

namespace kiln {

class Tokenizer;

inline constexpr int64_t kVocabMultiple = 128;

// `tokenizer_vocab` rounded up to a multiple of kVocabMultiple.
int64_t fitted_vocab_size(int64_t tokenizer_vocab);

// The chat template a model of `family` is published with, which a fresh one gets when its
// tokenizer brings none: qwen2 -> qwen2.5, qwen3 -> qwen3 (thinking), llama -> llama3 (3.1's).
ChatTemplateId family_chat_template(ModelFamily family);

// The special tokens, by text, of the published instruct models a chat template belongs to
// (Qwen2.5/Qwen3-Instruct's and Llama 3.1-Instruct's config.json and generation_config.json).
struct ChatModelTokens {
  std::string_view bos;                          // config.json's bos_token_id
  std::string_view eos;                          // config.json's eos_token_id: a turn's end
  std::vector<std::string_view> generation_eos;  // generation_config.json's eos_token_id list:
                                                 // the template's stop tokens, in their order
  std::string_view pad;                          // generation_config's pad_token_id; "": none
};
const ChatModelTokens& chat_model_tokens(ChatTemplateId id);

// The template `kiln init` writes for a model of `family` fitted to the tokenizer at
// `tokenizer_json` (rules above). `setting` is HfModelFiles::read's: "" keeps the tokenizer's
// own; `tokens` is the template whose models' special tokens the model takes.
struct FittedTemplate {
  std::string setting;
  ChatTemplateId tokens;
};
FittedTemplate fitted_chat_template(ModelFamily family, const std::filesystem::path& tokenizer_json,
                                    std::string_view template_setting);

// Sets (or removes) bos_token_id and eos_token_id of a config.json object as above and returns
// the generation_config.json to write beside it; `tokenizer_json` is the file `tokenizer` was
// loaded from. Logs one warning naming the tokens of `tokens` the tokenizer lacks.
Json fit_special_tokens(Json& config, const Tokenizer& tokenizer,
                        const std::filesystem::path& tokenizer_json, ChatTemplateId tokens);

}  // namespace kiln
