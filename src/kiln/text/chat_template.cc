#include "kiln/text/chat_template.h"

#include <string_view>
#include <utility>

#include "kiln/base/error.h"

namespace kiln {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";

constexpr std::string_view kToolsHeader =
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsFooter =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";

class Pieces {
 public:
  void start() { out_.push_back({ChatPiece::Kind::kImStart, std::string(kImStart), false}); }
  void end(bool reply = false) {
    out_.push_back({ChatPiece::Kind::kImEnd, std::string(kImEnd), reply});
  }
  void text(std::string s, bool reply = false) {
    out_.push_back({ChatPiece::Kind::kText, std::move(s), reply});
  }
  // <|im_start|>{role}\n{content}<|im_end|>\n
  void turn(std::string_view role, std::string_view content) {
    start();
    text(std::string(role) + "\n" + std::string(content));
    end();
    text("\n");
  }
  std::vector<ChatPiece> take() { return std::move(out_); }

 private:
  std::vector<ChatPiece> out_;
};

std::string system_text(const std::vector<ChatMessage>& messages,
                        const std::vector<std::string>& tools) {
  const bool own = !messages.empty() && messages[0].role == "system";
  std::string s = own ? messages[0].content : std::string(kQwenDefaultSystem);
  if (tools.empty()) return s;
  s += kToolsHeader;
  for (const std::string& t : tools) s.append("\n").append(t);
  s += kToolsFooter;
  return s;
}

// What the model writes after "<|im_start|>assistant\n" in a turn with tool calls: the template
// renders "<|im_start|>assistant" + ("\n" + content if any) + "\n<tool_call>..." per call.
std::string tool_call_reply(const ChatMessage& m) {
  std::string s = m.content.empty() ? std::string() : m.content + "\n";
  for (size_t i = 0; i < m.tool_calls.size(); ++i) {
    const ToolCall& c = m.tool_calls[i];
    if (i > 0) s += "\n";
    s.append("<tool_call>\n{\"name\": \"").append(c.name).append("\", \"arguments\": ");
    s.append(c.arguments).append("}\n</tool_call>");
  }
  return s;
}

void assistant(Pieces& p, const ChatMessage& m) {
  p.start();
  p.text("assistant\n");  // the generation prompt: given, not produced
  p.text(m.tool_calls.empty() ? m.content : tool_call_reply(m), true);
  p.end(true);  // produced, so the model learns to stop
  p.text("\n");
}

}  // namespace

std::vector<ChatPiece> chat_pieces(const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt,
                                   const std::vector<std::string>& tools) {
  Pieces p;
  p.turn("system", system_text(messages, tools));
  const bool own_system = !messages.empty() && messages[0].role == "system";
  for (size_t i = own_system ? 1 : 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "assistant") {
      assistant(p, m);
    } else if (m.role == "tool") {
      const bool first = i == 0 || messages[i - 1].role != "tool";
      const bool last = i + 1 == messages.size() || messages[i + 1].role != "tool";
      if (first) p.start();
      p.text((first ? "user" : "") + std::string("\n<tool_response>\n") + m.content +
             "\n</tool_response>");
      if (last) {
        p.end();
        p.text("\n");
      }
    } else {
      KILN_CHECK(m.role == "user" || m.role == "system", "chat role '{}'", m.role);
      p.turn(m.role, m.content);
    }
  }
  if (add_generation_prompt) {
    p.start();
    p.text("assistant\n");
  }
  return p.take();
}

std::string render_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        const std::vector<std::string>& tools) {
  std::string out;
  for (const ChatPiece& piece : chat_pieces(messages, add_generation_prompt, tools)) {
    out += piece.text;
  }
  return out;
}

namespace {
int32_t required_token(const Tokenizer& tokenizer, std::string_view token) {
  const int32_t id = tokenizer.token_id(token);
  if (id < 0) fail("{}: no {} token, which the chat template needs", tokenizer.source(), token);
  return id;
}
}  // namespace

std::vector<int32_t> encode_chat(const Tokenizer& tokenizer,
                                 const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, bool parse_special_in_content,
                                 const std::vector<std::string>& tools) {
  const std::vector<ChatPiece> pieces = chat_pieces(messages, add_generation_prompt, tools);
  if (parse_special_in_content) {
    std::string text;
    for (const ChatPiece& piece : pieces) text += piece.text;
    return tokenizer.encode(text, true);
  }
  const int32_t start = required_token(tokenizer, kImStart);
  const int32_t end = required_token(tokenizer, kImEnd);
  std::vector<int32_t> ids;
  std::string run;  // adjacent text pieces encode as one text, as the whole string would
  for (const ChatPiece& piece : pieces) {
    if (piece.kind == ChatPiece::Kind::kText) {
      run += piece.text;
      continue;
    }
    if (!run.empty()) tokenizer.encode(run, ids, false);
    run.clear();
    ids.push_back(piece.kind == ChatPiece::Kind::kImStart ? start : end);
  }
  if (!run.empty()) tokenizer.encode(run, ids, false);
  return ids;
}

}  // namespace kiln
