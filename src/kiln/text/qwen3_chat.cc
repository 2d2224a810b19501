// The Qwen3 chat template (assets/chat_templates/qwen3.jinja; qwen3-2504.jinja renders the same):
// ChatML without a default system prompt, thinking blocks and tools.
//
//   [<|im_start|>system\n{system}[\n\n]{tools block}<|im_end|>\n]   with tools or a first system
//   <|im_start|>{role}\n{content}<|im_end|>\n                        user, later system
//   <|im_start|>assistant\n[<think>\n{reasoning}\n</think>\n\n]{content}[tool calls]<|im_end|>\n
//   <|im_start|>user\n<tool_response>\n{content}\n</tool_response>...<|im_end|>\n   tool results
//   <|im_start|>assistant\n[<think>\n\n</think>\n\n]   generation prompt (the block: thinking off)
//
// An assistant's reasoning is its reasoning_content, else what a <think>...</think> at the start
// of its content holds (the content is what follows </think>). Turns after the last user query
// (the last user message that is not only a <tool_response>) render a think block when they are
// the last message or have reasoning; every other turn drops its reasoning.
#include <string>

#include "kiln/text/chat_pieces.h"
#include "kiln/text/published_templates.h"
#include "kiln/text/py_str.h"

namespace kiln::text {
namespace {

constexpr std::string_view kEmptyThink = "<think>\n\n</think>\n\n";

// The index of the last user message that is a query, not a tool result; the last index when
// there is none (so no turn comes after it).
size_t last_query_index(const std::vector<ChatMessage>& messages) {
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string_view c = messages[i].content;
    const bool tool_result = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
    if (messages[i].role == "user" && !tool_result) return i;
  }
  return messages.empty() ? 0 : messages.size() - 1;
}

std::string tool_calls_text(const ChatMessage& m, std::string_view content) {
  std::string s;
  for (size_t k = 0; k < m.tool_calls.size(); ++k) {
    const ToolCall& c = m.tool_calls[k];
    if (k > 0 || !content.empty()) s += "\n";
    s.append("<tool_call>\n{\"name\": \"").append(c.name).append("\", \"arguments\": ");
    s.append(c.arguments_text ? *c.arguments_text : c.arguments).append("}\n</tool_call>");
  }
  return s;
}

class Qwen3Chat final : public ChatTemplate {
 public:
  ChatTemplateId id() const override { return ChatTemplateId::kQwen3; }
  std::string_view name() const override { return "qwen3"; }
  std::string_view jinja() const override { return published_jinja(id()); }
  std::vector<std::string_view> stop_tokens() const override { return {kImEnd, "<|endoftext|>"}; }
  bool has_thinking() const override { return true; }

  std::vector<ChatPiece> pieces(const std::vector<ChatMessage>& messages,
                                const std::vector<OrderedJson>& tools,
                                const ChatOptions& options) const override {
    const bool thinking_off = options.enable_thinking == false;
    PieceWriter p;
    const bool own_system = !messages.empty() && messages[0].role == "system";
    if (!tools.empty()) {
      const std::string own = own_system ? messages[0].content + "\n\n" : std::string();
      chatml_turn(p, "system", own + qwen_tools_text(tools));
    } else if (own_system) {
      chatml_turn(p, "system", messages[0].content);
    }
    const size_t last_query = last_query_index(messages);
    for (size_t i = 0; i < messages.size(); ++i) {
      const ChatMessage& m = messages[i];
      if (m.role == "assistant") {
        assistant(p, m, i > last_query, i + 1 == messages.size(), thinking_off);
      } else if (m.reasoning_content) {
        refuse_field(*this, i, "reasoning_content");
      } else if (m.role == "tool") {
        chatml_tool_response(p, messages, i);
      } else if (i > 0 || m.role != "system") {
        chatml_turn(p, m.role, m.content);
      }
    }
    if (options.add_generation_prompt) {
      p.special(kImStart);
      p.text("assistant\n");
      if (thinking_off) p.text(kEmptyThink);
    }
    return p.take();
  }

 private:
  // after_query: the turn comes after the last user query. With thinking off, an empty think
  // block is the prompt the model is given, not part of its reply.
  static void assistant(PieceWriter& p, const ChatMessage& m, bool after_query, bool last,
                        bool thinking_off) {
    std::string_view content = m.content;
    std::string_view reasoning;
    if (m.reasoning_content) {
      reasoning = *m.reasoning_content;
    } else if (content.find("</think>") != std::string_view::npos) {
      reasoning = py_lstrip(
          py_split_last(py_rstrip(py_split_first(content, "</think>"), "\n"), "<think>"), "\n");
      content = py_lstrip(py_split_last(content, "</think>"), "\n");
    }
    p.special(kImStart);
    p.text("assistant\n");  // the generation prompt: given, not produced
    if (after_query && (last || !reasoning.empty())) {
      const std::string_view thought = py_strip(reasoning, "\n");
      const std::string block = "<think>\n" + std::string(thought) + "\n</think>\n\n";
      p.text(block, !(thinking_off && thought.empty()));
      p.text(py_lstrip(content, "\n"), true);
    } else {
      p.text(content, true);
    }
    p.text(tool_calls_text(m, content), true);
    p.special(kImEnd, true);  // produced, so the model learns to stop
    p.text("\n");
  }
};

}  // namespace

const ChatTemplate& qwen3_chat_template() {
  static const Qwen3Chat kTemplate;
  return kTemplate;
}

}  // namespace kiln::text
