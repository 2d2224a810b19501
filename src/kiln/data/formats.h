// The JSONL data formats (data.format), one example per line, and what each teaches:
//
//   chat         {"messages": [...], "tools": [...]} (messages and tools as chat_messages.h
//                reads them) rendered with the Qwen2.5 chat template (the default system prompt
//                when the first message is not "system"); loss on each assistant turn's reply
//                (content and tool calls) and its <|im_end|>, not on its
//                "<|im_start|>assistant\n" header or the "\n" after it
//   sharegpt     {"conversations": [{"from", "value"}, ...], "system", "tools"} (conversation.h),
//                rendered and masked as chat
//   instruction  {"instruction", "input", "output", "system", "history"} (conversation.h): the
//                chat [system, history..., user: instruction + "\n\n" + input, assistant: output]
//   completion   {"prompt": "...", "completion": "..."}: prompt + completion + <|endoftext|>, loss
//                on the completion and <|endoftext|>
//   text         {"text": "..."}: text + <|endoftext|>, loss on everything
//   tokens       {"input_ids": [...], "labels": [...]} (token_dataset.h), loss where labels say
//
// With train_on_prompt every token of the text formats takes loss. Other top-level fields are
// ignored; inside a message or turn, a field the template does not render is an error.
//
// Masks come from tokenizing piecewise: a line becomes segments (text or one special token), each
// tokenized on its own (special-token text inside content is parsed as the special token, as
// Hugging Face does), and a segment's tokens take loss or not as a whole. Chat segments end at
// the template's special tokens and at an assistant header, where generation starts:
//   <|im_start|> | "user\n{content}" | <|im_end|> | "\n" | <|im_start|> | "assistant\n" |
//   "{content}" | <|im_end|> | "\n"
// The tokenizer splits text at special tokens anyway, so this equals tokenizing the whole
// rendered string, except that an assistant reply is never merged with its header "\n" (a reply
// that starts with a line break): the tokens are those a model produces after the generation
// prompt "<|im_start|>assistant\n". A completion is likewise tokenized apart from its prompt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/base/json.h"
#include "kiln/data/token_dataset.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/tokenizer.h"

namespace kiln {

enum class DataFormat { kTokens, kChat, kInstruction, kCompletion, kText, kShareGpt };

// The one list of data formats: the recipe (data.format, data.train's per-file format), `kiln
// eval --format`, `kiln tokenize --format` and `kiln prepare-data` all read it, and
// docs/recipe.md documents it (tests/data/formats_test.cc checks the docs against it).
//
// A format's name or one of its aliases, the names other tools give the same layout:
//   alpaca -> instruction (Stanford Alpaca's instruction/input/output records)
//   openai, messages -> chat (OpenAI's fine-tuning files: {"messages": [...]})
// nullopt for anything else.
std::optional<DataFormat> parse_data_format(std::string_view name);
std::string_view data_format_name(DataFormat format);
// Every format's name, in the order of the enum.
const std::vector<std::string>& data_format_names();
// Every alias with the format it names, in documentation order.
const std::vector<std::pair<std::string, DataFormat>>& data_format_aliases();
// "tokens, chat, instruction, completion, text, sharegpt (aliases: alpaca = instruction, ...)":
// the valid names for an error or a --help line.
std::string data_format_choices();

// The format a record's fields say it is in (a JSON object: "messages" -> chat, "conversations"
// -> sharegpt, "instruction" -> instruction, "prompt" and "completion" -> completion, "text" ->
// text, "input_ids" -> tokens); nullopt when none matches.
std::optional<DataFormat> infer_data_format(const OrderedJson& record);
// The format of a data file's first record (source_lines.h: JSONL or a JSON array). Throws
// kiln::Error naming the file when it is empty, the record is not JSON, or no format matches
// (the error names `flag`, the option that sets the format instead).
DataFormat infer_file_format(const fs::path& file, const std::string& flag);

// A piece of a rendered example, tokenized on its own.
struct Segment {
  std::string text;      // used when special < 0
  int32_t special = -1;  // a single special token's id
  bool train = false;    // whether its tokens take loss
  bool operator==(const Segment&) const = default;
};

// The special tokens the text formats need; a tokenizer without them is refused.
struct SpecialTokens {
  int32_t im_start = -1, im_end = -1, endoftext = -1;
  static SpecialTokens of(const Tokenizer& tokenizer);
};

// The segments of a conversation, rendered as render_chat does (chat_pieces): their texts joined
// equal render_chat(messages, false, tools). Loss on the pieces the model produces (each
// assistant turn's reply and <|im_end|>), or on all with train_on_prompt.
std::vector<Segment> chat_segments(const std::vector<ChatMessage>& messages,
                                   const SpecialTokens& specials, bool train_on_prompt,
                                   const std::vector<std::string>& tools = {});

// Tokenizes segments into an example: labels are the ids of training segments, kIgnoreIndex
// elsewhere.
Example encode_segments(const Tokenizer& tokenizer, const std::vector<Segment>& segments);

struct Conversation;  // conversation.h

// Turns JSONL lines of one format into examples. Thread-safe (const).
class LineEncoder {
 public:
  // `tokenizer` (unused, may be null, for kTokens) must outlive the encoder. vocab_size bounds the
  // ids of the tokens format and is checked against the tokenizer's ids for the others.
  LineEncoder(DataFormat format, const Tokenizer* tokenizer, int64_t vocab_size,
              bool train_on_prompt);

  // The example of one line. Throws kiln::Error "<where>: <field>: <problem>" for a bad line:
  // malformed JSON or UTF-8, a missing field, a wrong type or role, nothing to learn. `origin`:
  // where the line starts in its file, for the position of a JSON syntax error.
  Example encode(std::string_view line, const std::string& where, TextPosition origin = {}) const;
  // The segments of one line (text formats only), for tests and tools (kiln tokenize
  // --show-loss): those whose tokens take loss have train set.
  std::vector<Segment> segments(std::string_view line, const std::string& where,
                                TextPosition origin = {}) const;

  DataFormat format() const { return format_; }

 private:
  std::vector<Segment> segments_of(const OrderedJson& obj, const std::string& where) const;
  std::vector<Segment> conversation_segments(const Conversation& c, const std::string& where) const;

  DataFormat format_;
  const Tokenizer* tokenizer_;
  int64_t vocab_size_;
  bool train_on_prompt_;
  SpecialTokens specials_;
};

}  // namespace kiln
