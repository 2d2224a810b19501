#include "kiln/text/chat_template.h"

#include <string_view>
#include <utility>

#include "kiln/base/error.h"
#include "kiln/text/utf8.h"

namespace kiln {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";

// The rendered text, and where the template itself put <|im_start|> and <|im_end|>.
struct Rendered {
  std::string text;
  std::vector<std::pair<size_t, size_t>> markers;  // [begin, end) of each template token

  void marker(std::string_view m) {
    markers.emplace_back(text.size(), text.size() + m.size());
    text += m;
  }
  void turn(std::string_view role, std::string_view content) {
    marker(kImStart);
    text.append(role).append("\n").append(content);
    marker(kImEnd);
    text += "\n";
  }
};

Rendered render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  Rendered r;
  const bool own_system = !messages.empty() && messages[0].role == "system";
  r.turn("system", own_system ? std::string_view(messages[0].content) : kQwenDefaultSystem);
  for (size_t i = own_system ? 1 : 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") {
        r.marker(kImStart);
        r.text += "user";
      }
      r.text.append("\n<tool_response>\n").append(m.content).append("\n</tool_response>");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") {
        r.marker(kImEnd);
        r.text += "\n";
      }
    } else {
      r.turn(m.role, m.content);
    }
  }
  if (add_generation_prompt) {
    r.marker(kImStart);
    r.text += "assistant\n";
  }
  return r;
}

int32_t required_token(const Tokenizer& tokenizer, std::string_view token) {
  const int32_t id = tokenizer.token_id(token);
  if (id < 0) fail("{}: no {} token, which the chat template needs", tokenizer.source(), token);
  return id;
}

}  // namespace

std::string render_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  return render(messages, add_generation_prompt).text;
}

std::vector<int32_t> encode_chat(const Tokenizer& tokenizer,
                                 const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, bool parse_special_in_content) {
  const Rendered r = render(messages, add_generation_prompt);
  if (parse_special_in_content) return tokenizer.encode(r.text, true);
  const int32_t start = required_token(tokenizer, kImStart);
  const int32_t end = required_token(tokenizer, kImEnd);
  std::vector<int32_t> ids;
  size_t at = 0;
  const std::string_view text = r.text;
  for (const auto& [b, e] : r.markers) {
    if (b > at) tokenizer.encode(text.substr(at, b - at), ids, false);
    ids.push_back(text.substr(b, e - b) == kImStart ? start : end);
    at = e;
  }
  if (at < text.size()) tokenizer.encode(text.substr(at), ids, false);
  return ids;
}

std::vector<ChatMessage> chat_messages_from_json(const Json& messages, const std::string& what) {
  if (!messages.is_array()) fail("{} is a JSON {}, expected an array", what, messages.type_name());
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object()) fail("{}[{}] is a JSON {}, expected an object", what, i, m.type_name());
    ChatMessage msg;
    for (const char* key : {"role", "content"}) {
      const auto it = m.find(key);
      if (it == m.end()) fail("{}[{}].{} is missing", what, i, key);
      if (!it->is_string()) {
        fail("{}[{}].{} is a JSON {}, expected a string", what, i, key, it->type_name());
      }
      (std::string_view(key) == "role" ? msg.role : msg.content) = it->get<std::string>();
    }
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "tool") {
      fail("{}[{}].role is '{}', expected system, user, assistant or tool", what, i,
           text::printable(msg.role));
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace kiln
