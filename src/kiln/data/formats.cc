#include "kiln/data/formats.h"

#include <fmt/format.h>

#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/base/ignore_index.h"
#include "kiln/data/conversation.h"
#include "kiln/data/preference_pairs.h"
#include "kiln/data/source_lines.h"

namespace kiln {

namespace {

const std::vector<std::string> kFormatNames = {"tokens", "chat",     "instruction", "completion",
                                               "text",   "sharegpt", "preference"};
const std::vector<std::pair<std::string, DataFormat>> kAliases = {
    {"alpaca", DataFormat::kInstruction},
    {"openai", DataFormat::kChat},
    {"messages", DataFormat::kChat}};

const OrderedJson& required(const OrderedJson& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail("{}: missing field '{}'", where, key);
  return *it;
}

std::string string_field(const OrderedJson& obj, const char* key, const std::string& where) {
  const OrderedJson& v = required(obj, key, where);
  if (!v.is_string()) fail("{}: {}: expected a string, got {}", where, key, json_preview(v));
  return v.get<std::string>();
}

}  // namespace

std::optional<DataFormat> parse_data_format(std::string_view name) {
  for (size_t i = 0; i < kFormatNames.size(); ++i) {
    if (kFormatNames[i] == name) return static_cast<DataFormat>(i);
  }
  for (const auto& [alias, format] : kAliases) {
    if (alias == name) return format;
  }
  return std::nullopt;
}

const std::vector<std::pair<std::string, DataFormat>>& data_format_aliases() { return kAliases; }

std::string data_format_choices() {
  std::string out;
  for (const std::string& n : kFormatNames) out += (out.empty() ? "" : ", ") + n;
  out += " (aliases: ";
  for (size_t i = 0; i < kAliases.size(); ++i) {
    out += fmt::format("{}{} = {}", i ? ", " : "", kAliases[i].first,
                       data_format_name(kAliases[i].second));
  }
  return out + ")";
}

std::optional<DataFormat> infer_data_format(const OrderedJson& record) {
  if (!record.is_object()) return std::nullopt;
  const auto has = [&](const char* key) { return record.contains(key); };
  if ((has("chosen") && has("rejected")) || has("chosen_input_ids") || has("chosen_ids")) {
    return DataFormat::kPreference;
  }
  if (has("messages")) return DataFormat::kChat;
  if (has("conversations")) return DataFormat::kShareGpt;
  if (has("instruction")) return DataFormat::kInstruction;
  if (has("prompt") && has("completion")) return DataFormat::kCompletion;
  if (has("text")) return DataFormat::kText;
  if (has("input_ids")) return DataFormat::kTokens;
  return std::nullopt;
}

DataFormat infer_file_format(const fs::path& file, const std::string& flag) {
  const std::string text = read_file(file);
  const std::vector<SourceLine> lines = source_lines(text, file.string());
  if (lines.empty())
    fail("{}: no records, so no data format to infer ({} sets it)", file.string(), flag);
  const std::string where = fmt::format("{}:{}", file.string(), lines.front().number);
  const auto format =
      infer_data_format(parse_json_ordered(lines.front().text, where, lines.front().position()));
  if (!format) {
    fail(
        "{}: the first record has none of the fields that name a data format (messages, "
        "conversations, instruction, prompt + completion, text, input_ids, chosen + rejected); "
        "set it with {} ({})",
        where, flag, data_format_choices());
  }
  return *format;
}

std::string_view data_format_name(DataFormat format) {
  return kFormatNames[static_cast<size_t>(format)];
}

const std::vector<std::string>& data_format_names() { return kFormatNames; }

int32_t end_of_text_token(const Tokenizer& tokenizer) {
  for (const std::string_view token : {"<|endoftext|>", "<|end_of_text|>"}) {
    if (const int32_t id = tokenizer.token_id(token); id >= 0) return id;
  }
  fail("{}: no <|endoftext|> or <|end_of_text|> token, which the text data formats need",
       tokenizer.source());
}

std::vector<Segment> chat_segments(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                                   const std::vector<ChatMessage>& messages,
                                   const std::vector<OrderedJson>& tools,
                                   const ChatOptions& options, bool train_on_prompt) {
  ChatOptions rendering = options;
  rendering.add_generation_prompt = false;
  std::vector<Segment> out;
  for (ChatPiece& p : tmpl.pieces(messages, tools, rendering)) {
    const bool train = p.reply || train_on_prompt;
    if (p.kind == ChatPiece::Kind::kSpecial) {
      out.push_back({"", chat_special_token(tokenizer, tmpl, p.text), train});
    } else {
      out.push_back({std::move(p.text), -1, train});
    }
  }
  return out;
}

Example encode_segments(const Tokenizer& tokenizer, const std::vector<Segment>& segments) {
  Example ex;
  for (const Segment& s : segments) {
    const size_t begin = ex.input_ids.size();
    if (s.special >= 0) {
      ex.input_ids.push_back(s.special);
    } else if (!s.text.empty()) {
      tokenizer.encode(s.text, ex.input_ids, /*parse_special=*/true);
    }
    const size_t n = ex.input_ids.size() - begin;
    if (s.train) {
      ex.labels.insert(ex.labels.end(), ex.input_ids.end() - static_cast<std::ptrdiff_t>(n),
                       ex.input_ids.end());
    } else {
      ex.labels.insert(ex.labels.end(), n, kIgnoreIndex);
    }
  }
  return ex;
}

LineEncoder::LineEncoder(DataFormat format, const Tokenizer* tokenizer, int64_t vocab_size,
                         bool train_on_prompt, const ChatTemplate* chat, ChatOptions chat_options)
    : format_(format),
      tokenizer_(tokenizer),
      vocab_size_(vocab_size),
      train_on_prompt_(train_on_prompt),
      chat_(chat ? chat : &chat_template(ChatTemplateId::kQwen25)),
      chat_options_(std::move(chat_options)) {
  if (format != DataFormat::kTokens && tokenizer != nullptr) {
    end_of_text_ = end_of_text_token(*tokenizer);
  }
  // Preference records may come pre-tokenized (then no tokenizer is needed).
  KILN_CHECK(
      format == DataFormat::kTokens || format == DataFormat::kPreference || tokenizer != nullptr,
      "data format {} needs a tokenizer", data_format_name(format));
  if (format == DataFormat::kPreference) {
    pairs_ = {tokenizer, vocab_size, chat_, chat_options_,
              tokenizer != nullptr ? completion_end_token(*tokenizer, tokenizer->source()) : -1};
  }
}

std::vector<Segment> LineEncoder::conversation_segments(const Conversation& c,
                                                        const std::string& where) const {
  const bool learns = std::any_of(c.messages.begin(), c.messages.end(),
                                  [](const ChatMessage& m) { return m.role == "assistant"; });
  if (!learns && !train_on_prompt_) {
    fail(
        "{}: {}: no assistant message, so nothing to learn (data.train_on_prompt trains on the "
        "whole conversation)",
        where, format_ == DataFormat::kShareGpt ? "conversations" : "messages");
  }
  return chat_segments(*tokenizer_, *chat_, c.messages, c.tools, chat_options_, train_on_prompt_);
}

std::vector<Segment> LineEncoder::segments_of(const OrderedJson& obj,
                                              const std::string& where) const {
  const bool prompt = train_on_prompt_;
  switch (format_) {
    case DataFormat::kChat:
      return conversation_segments(chat_conversation(obj, where), where);
    case DataFormat::kShareGpt:
      return conversation_segments(sharegpt_conversation(obj, where), where);
    case DataFormat::kInstruction:
      return conversation_segments(instruction_conversation(obj, where), where);
    case DataFormat::kCompletion: {
      std::string p = string_field(obj, "prompt", where);
      std::string c = string_field(obj, "completion", where);
      return with_special_tokens({{std::move(p), -1, prompt}, {std::move(c), -1, true}});
    }
    case DataFormat::kText: {
      std::string t = string_field(obj, "text", where);
      if (t.empty()) fail("{}: text: expected a non-empty string", where);
      return with_special_tokens({{std::move(t), -1, true}});
    }
    case DataFormat::kTokens:
    case DataFormat::kPreference:  // two sequences: encode()
      break;
  }
  KILN_CHECK(false, "segments of format {}", data_format_name(format_));
  return {};
}

// The text as Hugging Face's tokenizer(text) encodes it (the post-processor's tokens around it,
// taking loss as the text next to them does), then the end of text (unless the post-processor
// already ends with it).
std::vector<Segment> LineEncoder::with_special_tokens(std::vector<Segment> text) const {
  std::vector<Segment> out;
  for (const int32_t id : tokenizer_->special_prefix()) out.push_back({"", id, text.front().train});
  for (Segment& s : text) out.push_back(std::move(s));
  const std::span<const int32_t> suffix = tokenizer_->special_suffix();
  for (const int32_t id : suffix) out.push_back({"", id, true});
  if (suffix.empty() || suffix.back() != end_of_text_) out.push_back({"", end_of_text_, true});
  return out;
}

std::vector<Segment> LineEncoder::segments(std::string_view line, const std::string& where,
                                           TextPosition origin) const {
  const OrderedJson obj = parse_json_ordered(line, where, origin);
  if (!obj.is_object()) fail("{}: expected a JSON object, got {}", where, json_preview(obj));
  return segments_of(obj, where);
}

Example LineEncoder::encode(std::string_view line, const std::string& where,
                            TextPosition origin) const {
  if (format_ == DataFormat::kTokens) return parse_tokens_line(line, vocab_size_, where, origin);
  try {
    if (format_ == DataFormat::kPreference) {
      return encode_preference_pair(parse_json_ordered(line, where, origin), pairs_, where);
    }
    return encode_segments(*tokenizer_, segments(line, where, origin));
  } catch (const Error& e) {
    // The tokenizer's own errors (a regex hitting its match limit) do not know the line.
    const std::string msg = e.what();
    if (msg.rfind(where + ":", 0) == 0) throw;
    fail("{}: {}", where, msg);
  }
}

}  // namespace kiln
