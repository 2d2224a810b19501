#include "kiln/data/formats.h"

#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/kernels/ops.h"  // kIgnoreIndex

namespace kiln {

namespace {

const std::vector<std::string> kFormatNames = {"tokens", "chat", "instruction", "completion",
                                               "text"};

// A JSON value for a message, cut short so a huge value cannot flood the line.
std::string preview(const Json& v) {
  std::string s = v.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

const Json& required(const Json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail("{}: missing field '{}'", where, key);
  return *it;
}

std::string string_field(const Json& obj, const char* key, const std::string& where) {
  const Json& v = required(obj, key, where);
  if (!v.is_string()) fail("{}: {}: expected a string, got {}", where, key, preview(v));
  return v.get<std::string>();
}

std::vector<ChatMessage> parse_messages(const Json& obj, const std::string& where) {
  const Json& list = required(obj, "messages", where);
  if (!list.is_array() || list.empty()) {
    fail("{}: messages: expected a non-empty list of messages, got {}", where, preview(list));
  }
  std::vector<ChatMessage> out;
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& m = list[i];
    if (!m.is_object()) {
      fail("{}: messages[{}]: expected an object with role and content, got {}", where, i,
           preview(m));
    }
    const auto role = m.find("role");
    if (role == m.end()) fail("{}: messages[{}].role: missing", where, i);
    if (!role->is_string() || (*role != "system" && *role != "user" && *role != "assistant")) {
      fail("{}: messages[{}].role: expected system, user or assistant, got {}", where, i,
           role->is_string() ? "'" + role->get<std::string>() + "'" : preview(*role));
    }
    const auto content = m.find("content");
    if (content == m.end()) fail("{}: messages[{}].content: missing", where, i);
    if (!content->is_string()) {
      fail("{}: messages[{}].content: expected a string, got {}", where, i, preview(*content));
    }
    out.push_back({role->get<std::string>(), content->get<std::string>()});
  }
  return out;
}

}  // namespace

std::optional<DataFormat> parse_data_format(std::string_view name) {
  for (size_t i = 0; i < kFormatNames.size(); ++i) {
    if (kFormatNames[i] == name) return static_cast<DataFormat>(i);
  }
  return std::nullopt;
}

std::string_view data_format_name(DataFormat format) {
  return kFormatNames[static_cast<size_t>(format)];
}

const std::vector<std::string>& data_format_names() { return kFormatNames; }

SpecialTokens SpecialTokens::of(const Tokenizer& tokenizer) {
  SpecialTokens s;
  const auto need = [&](std::string_view token) {
    const int32_t id = tokenizer.token_id(token);
    if (id < 0)
      fail("{}: no {} token, which the text data formats need", tokenizer.source(), token);
    return id;
  };
  s.im_start = need("<|im_start|>");
  s.im_end = need("<|im_end|>");
  s.endoftext = need("<|endoftext|>");
  return s;
}

std::vector<Segment> chat_segments(const std::vector<ChatMessage>& messages,
                                   const SpecialTokens& specials, bool train_on_prompt) {
  const bool prompt = train_on_prompt;
  std::vector<Segment> out;
  const auto special = [&](int32_t id, bool train) { out.push_back({"", id, train}); };
  const auto text = [&](std::string s, bool train) { out.push_back({std::move(s), -1, train}); };
  // <|im_start|>{role}\n{content}<|im_end|>\n, as the Qwen2.5 template renders a turn.
  const auto turn = [&](const std::string& role, std::string_view content) {
    KILN_CHECK(role == "system" || role == "user" || role == "assistant", "role '{}'", role);
    special(specials.im_start, prompt);
    if (role == "assistant") {
      text("assistant\n", prompt);  // the generation prompt: given, not learnt
      text(std::string(content), true);
      special(specials.im_end, true);  // learnt, so the model knows when to stop
    } else {
      text(role + "\n" + std::string(content), prompt);
      special(specials.im_end, prompt);
    }
    text("\n", prompt);
  };
  const bool own_system = !messages.empty() && messages[0].role == "system";
  turn("system", own_system ? std::string_view(messages[0].content) : kQwenDefaultSystem);
  for (size_t i = own_system ? 1 : 0; i < messages.size(); ++i) {
    turn(messages[i].role, messages[i].content);
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
                         bool train_on_prompt)
    : format_(format),
      tokenizer_(tokenizer),
      vocab_size_(vocab_size),
      train_on_prompt_(train_on_prompt) {
  if (format != DataFormat::kTokens) {
    KILN_CHECK(tokenizer != nullptr, "data format {} needs a tokenizer", data_format_name(format));
    specials_ = SpecialTokens::of(*tokenizer);
  }
}

std::vector<Segment> LineEncoder::segments_of(const Json& obj, const std::string& where) const {
  const bool prompt = train_on_prompt_;
  switch (format_) {
    case DataFormat::kChat: {
      const std::vector<ChatMessage> messages = parse_messages(obj, where);
      const bool learns = std::any_of(messages.begin(), messages.end(),
                                      [](const ChatMessage& m) { return m.role == "assistant"; });
      if (!learns && !prompt) {
        fail(
            "{}: messages: no assistant message, so nothing to learn (data.train_on_prompt "
            "trains on the whole conversation)",
            where);
      }
      return chat_segments(messages, specials_, prompt);
    }
    case DataFormat::kInstruction: {
      std::string user = string_field(obj, "instruction", where);
      const auto input = obj.find("input");
      if (input != obj.end() && !input->is_null()) {
        if (!input->is_string())
          fail("{}: input: expected a string, got {}", where, preview(*input));
        if (!input->get_ref<const std::string&>().empty()) {
          user += "\n\n" + input->get<std::string>();
        }
      }
      std::string output = string_field(obj, "output", where);
      return chat_segments({{"user", std::move(user)}, {"assistant", std::move(output)}}, specials_,
                           prompt);
    }
    case DataFormat::kCompletion: {
      std::string p = string_field(obj, "prompt", where);
      std::string c = string_field(obj, "completion", where);
      return {
          {std::move(p), -1, prompt}, {std::move(c), -1, true}, {"", specials_.endoftext, true}};
    }
    case DataFormat::kText: {
      std::string t = string_field(obj, "text", where);
      if (t.empty()) fail("{}: text: expected a non-empty string", where);
      return {{std::move(t), -1, true}, {"", specials_.endoftext, true}};
    }
    case DataFormat::kTokens:
      break;
  }
  KILN_CHECK(false, "segments of format {}", data_format_name(format_));
  return {};
}

std::vector<Segment> LineEncoder::segments(std::string_view line, const std::string& where) const {
  const Json obj = parse_json(line, where);
  if (!obj.is_object()) fail("{}: expected a JSON object, got {}", where, preview(obj));
  return segments_of(obj, where);
}

Example LineEncoder::encode(std::string_view line, const std::string& where) const {
  if (format_ == DataFormat::kTokens) return parse_tokens_line(line, vocab_size_, where);
  try {
    return encode_segments(*tokenizer_, segments(line, where));
  } catch (const Error& e) {
    // The tokenizer's own errors (a regex hitting its match limit) do not know the line.
    const std::string msg = e.what();
    if (msg.rfind(where + ":", 0) == 0) throw;
    fail("{}: {}", where, msg);
  }
}

}  // namespace kiln
