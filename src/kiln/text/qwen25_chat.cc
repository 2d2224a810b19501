// The Qwen2.5-Instruct chat template (assets/chat_templates/qwen2.5.jinja):
//
//   <|im_start|>system\n{system, or the default below}{tools block}<|im_end|>\n
//   <|im_start|>{role}\n{content}<|im_end|>\n            user, later system, plain assistant
//   <|im_start|>assistant[\n{content}]{\n<tool_call>\n{"name": "...", "arguments": ...}\n
//     </tool_call> for each call}<|im_end|>\n              assistant with tool calls
//   <|im_start|>user{\n<tool_response>\n{content}\n</tool_response> for each consecutive tool
//     message}<|im_end|>\n
//   <|im_start|>assistant\n                               if add_generation_prompt
//
// A system message counts as the system prompt only when it comes first; later ones render like
// a user message. With tools, the system turn lists each tool's JSON in <tools></tools> and how
// to call them, as the template does.
#include <string>

#include "kiln/text/chat_pieces.h"
#include "kiln/text/published_templates.h"

namespace kiln::text {
namespace {

constexpr std::string_view kDefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

std::string system_text(const std::vector<ChatMessage>& messages,
                        const std::vector<OrderedJson>& tools) {
  const bool own = !messages.empty() && messages[0].role == "system";
  std::string s = own ? messages[0].content : std::string(kDefaultSystem);
  if (tools.empty()) return s;
  return s + "\n\n" + qwen_tools_text(tools);
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

class Qwen25Chat final : public ChatTemplate {
 public:
  ChatTemplateId id() const override { return ChatTemplateId::kQwen25; }
  std::string_view name() const override { return "qwen2.5"; }
  std::string_view jinja() const override { return published_jinja(id()); }
  std::vector<std::string_view> stop_tokens() const override { return {kImEnd, "<|endoftext|>"}; }

  std::vector<ChatPiece> pieces(const std::vector<ChatMessage>& messages,
                                const std::vector<OrderedJson>& tools,
                                const ChatOptions& options) const override {
    check_enable_thinking(*this, options.enable_thinking, "enable_thinking");
    PieceWriter p;
    chatml_turn(p, "system", system_text(messages, tools));
    const bool own_system = !messages.empty() && messages[0].role == "system";
    for (size_t i = 0; i < messages.size(); ++i) {
      const ChatMessage& m = messages[i];
      if (m.reasoning_content) refuse_field(*this, i, "reasoning_content");
      if (i == 0 && own_system) continue;
      if (m.role == "assistant") {
        p.special(kImStart);
        p.text("assistant\n");  // the generation prompt: given, not produced
        p.text(m.tool_calls.empty() ? m.content : tool_call_reply(m), true);
        p.special(kImEnd, true);  // produced, so the model learns to stop
        p.text("\n");
      } else if (m.role == "tool") {
        chatml_tool_response(p, messages, i);
      } else {
        chatml_turn(p, m.role, m.content);
      }
    }
    if (options.add_generation_prompt) {
      p.special(kImStart);
      p.text("assistant\n");
    }
    return p.take();
  }
};

}  // namespace

const ChatTemplate& qwen25_chat_template() {
  static const Qwen25Chat kTemplate;
  return kTemplate;
}

}  // namespace kiln::text
