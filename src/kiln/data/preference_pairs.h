// data.format preference: a record of a prompt and two completions of it, the chosen and the
// rejected (DPO's pairs), in TRL's three forms:
//   standard        {"prompt": "...", "chosen": "...", "rejected": "..."}: each text tokenized
//                   alone, as TRL's tokenize_row does (add_special_tokens=False: no BOS), and the
//                   completion-end token appended to each completion
//   conversational  prompt, chosen and rejected are message lists (chat_messages.h): the prompt
//                   rendered with the chat template and its generation prompt; a completion is
//                   what rendering prompt + completion adds after the longest prefix it shares
//                   with that, tokenized alone, then the completion-end token (TRL's
//                   maybe_apply_chat_template and tokenize_row)
//   pre-tokenized   {"prompt_input_ids": [...], "chosen_input_ids": [...], "rejected_input_ids":
//                   [...]} (or current TRL's prompt_ids, chosen_ids, rejected_ids): used exactly
//                   as given, nothing added
// "question" and "instruction" are read as the prompt where a record has no "prompt" (Intel's
// orca_dpo_pairs, LLaMA-Factory's alpaca-style preference files). A text record with no prompt,
// or whose prompt is text beside message lists (ultrafeedback_binarized, whose completions hold
// the user's turn too), has an implicit prompt, as TRL's maybe_extract_prompt reads it: what
// chosen and rejected both start with (the messages, or the characters up to a space before the
// first difference); the completions are the rest. The completion-end token is
// the tokenizer_config.json's eos_token beside the tokenizer (TRL's eos_token_id), else the end
// of text (formats.h).
//
// A pair is stored as ONE example, so that files, weights, held-out sets, caches and samplers
// keep its two sequences together: the chosen sequence (prompt + completion) then the rejected
// one, labels on the completions only and never on a sequence's first token (nothing predicts
// it). pair_sequences splits it back: the rejected sequence starts where the second run of
// unlabelled positions does.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "kiln/base/json.h"
#include "kiln/data/example_source.h"
#include "kiln/data/overlong.h"
#include "kiln/data/token_dataset.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/tokenizer.h"

namespace kiln {

// What encoding a record needs besides the record (the tokenizer may be null for pre-tokenized
// records only).
struct PairEncoding {
  const Tokenizer* tokenizer = nullptr;
  int64_t vocab_size = 0;
  const ChatTemplate* chat = nullptr;  // the conversational form's
  ChatOptions chat_options;
  int32_t completion_end = -1;  // appended to each text completion
};

// The pair of one record (a JSON object), as one example (above). Throws kiln::Error "<where>:
// <field>: <problem>" for a missing field, a wrong type or an id out of range.
Example encode_preference_pair(const OrderedJson& record, const PairEncoding& e,
                               const std::string& where);

// The chosen and rejected sequences of a pair example.
std::pair<ExampleView, ExampleView> pair_sequences(ExampleView pair);

// Why a pair is not trained on, or kKept.
enum class PairFit { kKept, kTruncated, kDropped, kEmpty, kIdentical };

// Fits each sequence of the pair to seq_len tokens, the prompt first (TRL's keep_end truncation
// of the prompt): an overlong sequence loses its prompt's first tokens, and its completion's
// last ones only when the completion alone is longer (overlong truncate); or the pair is left
// out (overlong drop: kDropped). A pair with an empty completion (kEmpty) or with chosen equal to
// rejected (kIdentical: no preference to learn) is left out too, before any cut.
PairFit fit_pair(Example& pair, int seq_len, Overlong overlong);

// The completion-end token for `tokenizer` loaded from `tokenizer_json` (above).
int32_t completion_end_token(const Tokenizer& tokenizer, const std::string& tokenizer_json);

}  // namespace kiln
