// The JSONL data formats (data.format), one example per line, and what each teaches:
//
//   chat         {"messages": [...], "tools": [...]} (messages and tools as chat_messages.h
//                reads them) rendered with the chat template (chat_template_choice.h: qwen2.5,
//                qwen3 or llama3); loss on each assistant turn's reply (its think block, content
//                and tool calls) and the token that ends it (<|im_end|>, <|eot_id|>), not on its
//                header ("<|im_start|>assistant\n") or what follows the end token
//   sharegpt     {"conversations": [{"from", "value"}, ...], "system", "tools"} (conversation.h),
//                rendered and masked as chat
//   instruction  {"instruction", "input", "output", "system", "history"} (conversation.h): the
//                chat [system, history..., user: instruction + "\n\n" + input, assistant: output]
//   completion   {"prompt": "...", "completion": "..."}: prompt + completion + end of text, loss
//                on the completion and the end of text
//   text         {"text": "..."}: text + end of text, loss on everything
//
// The end of text is <|endoftext|> (Qwen) or <|end_of_text|> (Llama 3). completion and text get
// the tokenizer's post-processor tokens as Hugging Face's tokenizer(text) adds them (Llama 3's
// <|begin_of_text|> first; none for Qwen), the chat formats never (their templates render their
// own, as apply_chat_template tokenizes with add_special_tokens=False).
//   tokens       {"input_ids": [...], "labels": [...]} (token_dataset.h), loss where labels say
//   preference   {"prompt", "chosen", "rejected"} as text, messages or token ids: a DPO pair,
//                one example holding both sequences (preference_pairs.h)
//
// With train_on_prompt every token of the text formats takes loss. Other top-level fields are
// ignored; inside a message or turn, a field the template does not render is an error.
//
// Masks come from tokenizing piecewise: a line becomes segments (text or one special token), each
// tokenized on its own (special-token text inside content is parsed as the special token, as
// Hugging Face does), and a segment's tokens take loss or not as a whole. Chat segments are the
// template's pieces (chat_template.h): they end at the template's special tokens and where a
// reply starts after its header, e.g. for qwen2.5
//   <|im_start|> | "user\n{content}" | <|im_end|> | "\n" | <|im_start|> | "assistant\n" |
//   "{content}" | <|im_end|> | "\n"
// The tokenizer splits text at special tokens anyway, so this equals tokenizing the whole
// rendered string, except that an assistant reply is never merged with its header's "\n" (a
// reply that starts with a line break): the tokens are those a model produces after the
// generation prompt. A completion is likewise tokenized apart from its prompt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/base/json.h"
#include "kiln/data/data_format.h"
#include "kiln/data/preference_pairs.h"
#include "kiln/data/token_dataset.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/tokenizer.h"

namespace kiln {

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

// The end-of-text token of the text formats: <|endoftext|>, else <|end_of_text|>; a tokenizer
// with neither is refused.
int32_t end_of_text_token(const Tokenizer& tokenizer);

// The segments of a conversation, rendered by `tmpl` (without a generation prompt): their texts
// joined equal render_chat(tmpl, messages, tools, options). Loss on the pieces the model produces
// (each assistant turn's reply and its end token), or on all with train_on_prompt.
std::vector<Segment> chat_segments(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                                   const std::vector<ChatMessage>& messages,
                                   const std::vector<OrderedJson>& tools,
                                   const ChatOptions& options, bool train_on_prompt);

// Tokenizes segments into an example: labels are the ids of training segments, kIgnoreIndex
// elsewhere.
Example encode_segments(const Tokenizer& tokenizer, const std::vector<Segment>& segments);

struct Conversation;  // conversation.h

// Turns JSONL lines of one format into examples. Thread-safe (const).
class LineEncoder {
 public:
  // `tokenizer` (unused, may be null, for kTokens) must outlive the encoder. vocab_size bounds the
  // ids of the tokens format and is checked against the tokenizer's ids for the others. `chat`
  // renders the chat formats (nullptr: qwen2.5, kiln's default for a model without a template)
  // with `chat_options` (their enable_thinking).
  LineEncoder(DataFormat format, const Tokenizer* tokenizer, int64_t vocab_size,
              bool train_on_prompt, const ChatTemplate* chat = nullptr,
              ChatOptions chat_options = {});

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
  std::vector<Segment> with_special_tokens(std::vector<Segment> text) const;

  DataFormat format_;
  const Tokenizer* tokenizer_;
  int64_t vocab_size_;
  bool train_on_prompt_;
  const ChatTemplate* chat_;
  ChatOptions chat_options_;
  int32_t end_of_text_ = -1;
  PairEncoding pairs_;  // the preference format's
};

}  // namespace kiln
