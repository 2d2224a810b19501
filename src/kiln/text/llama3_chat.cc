// The Llama 3.1 / 3.2 Instruct chat template (assets/chat_templates/llama3.1.jinja and
// llama3.2.jinja, which render the same when a date is given and builtin_tools is not):
//
//   <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n
//   [Environment: ipython\n]Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n
//   {system message, trimmed}<|eot_id|>
//   [<|start_header_id|>user<|end_header_id|>\n\n{tool instructions}{each tool as JSON,
//     indented 4, then \n\n}{first user message, trimmed}<|eot_id|>]          with tools
//   <|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>
//   <|start_header_id|>assistant<|end_header_id|>\n\n{"name": "...", "parameters": {...}}
//     <|eot_id|>                                                     an assistant's tool call
//   <|start_header_id|>ipython<|end_header_id|>\n\n{content as a JSON string}<|eot_id|>  tool
//   <|start_header_id|>assistant<|end_header_id|>\n\n                 generation prompt
//
// The system block is always there; the date is options.date_string, else the template's
// default, 26 Jul 2024. What the template would drop or refuse is refused with one line: a
// second tool call in one message (it raises), content beside a tool call (it drops it), tools
// without a user message to carry them. An empty tools list is no tools (HF renders [] with the
// "Environment: ipython" line; kiln cannot tell [] from none).
#include <string>

#include "kiln/base/error.h"
#include "kiln/text/chat_pieces.h"
#include "kiln/text/published_templates.h"
#include "kiln/text/py_str.h"
#include "kiln/text/tojson.h"

namespace kiln::text {
namespace {

constexpr std::string_view kBeginOfText = "<|begin_of_text|>";
constexpr std::string_view kStartHeader = "<|start_header_id|>";
constexpr std::string_view kEndHeader = "<|end_header_id|>";
constexpr std::string_view kEot = "<|eot_id|>";
constexpr std::string_view kDefaultDate = "26 Jul 2024";
constexpr std::string_view kToolInstructions =
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": "
    "function name, \"parameters\": dictionary of argument name and its value}.Do not use "
    "variables.\n\n";

// <|start_header_id|>{role}<|end_header_id|>\n\n
void header(PieceWriter& p, std::string_view role) {
  p.special(kStartHeader);
  p.text(role);
  p.special(kEndHeader);
  p.text("\n\n");
}

class Llama3Chat final : public ChatTemplate {
 public:
  ChatTemplateId id() const override { return ChatTemplateId::kLlama3; }
  std::string_view name() const override { return "llama3"; }
  std::string_view jinja() const override { return published_jinja(id()); }
  std::vector<std::string_view> stop_tokens() const override {
    return {kEot, "<|eom_id|>", "<|end_of_text|>"};
  }
  std::string_view default_date() const override { return kDefaultDate; }

  std::vector<ChatPiece> pieces(const std::vector<ChatMessage>& messages,
                                const std::vector<OrderedJson>& tools,
                                const ChatOptions& options) const override {
    check_enable_thinking(*this, options.enable_thinking, "enable_thinking");
    for (size_t i = 0; i < messages.size(); ++i) {
      if (messages[i].reasoning_content) refuse_field(*this, i, "reasoning_content");
    }
    PieceWriter p;
    p.special(kBeginOfText);
    const bool own_system = !messages.empty() && messages[0].role == "system";
    size_t next = own_system ? 1 : 0;
    header(p, "system");
    p.text(std::string(tools.empty() ? "" : "Environment: ipython\n") +
           "Cutting Knowledge Date: December 2023\nToday Date: " +
           std::string(options.date_string.empty() ? kDefaultDate : options.date_string) + "\n\n" +
           std::string(own_system ? py_trim(messages[0].content) : ""));
    p.special(kEot);
    if (!tools.empty()) tools_turn(p, messages, next++, tools);
    for (size_t i = next; i < messages.size(); ++i) message(p, messages[i], i);
    if (options.add_generation_prompt) header(p, "assistant");
    return p.take();
  }

 private:
  // The tools go into the first message after the system one, which must be the user's.
  static void tools_turn(PieceWriter& p, const std::vector<ChatMessage>& messages, size_t i,
                         const std::vector<OrderedJson>& tools) {
    if (i >= messages.size()) {
      fail(
          "tools: the llama3 chat template puts them in the first user message, and there is "
          "none");
    }
    if (messages[i].role != "user") {
      fail(
          "messages[{}].role is '{}': with tools, the llama3 chat template renders this message "
          "as the user's, so it must be user",
          i, messages[i].role);
    }
    header(p, "user");
    std::string s(kToolInstructions);
    for (const OrderedJson& t : tools) s.append(tojson(t, 4)).append("\n\n");
    p.text(s + std::string(py_trim(messages[i].content)));
    p.special(kEot);
  }

  void message(PieceWriter& p, const ChatMessage& m, size_t i) const {
    if (m.role == "tool") {
      header(p, "ipython");
      p.text(tojson(OrderedJson(m.content)));  // a string is iterable: the template's tojson
      p.special(kEot);
      return;
    }
    if (!m.tool_calls.empty()) {
      if (m.tool_calls.size() != 1) {
        fail(
            "messages[{}].tool_calls: the llama3 chat template takes one tool call per message, "
            "not {}",
            i, m.tool_calls.size());
      }
      if (!m.content.empty()) {
        fail(
            "messages[{}].content: the llama3 chat template drops the content of a message with "
            "a tool call",
            i);
      }
      const ToolCall& c = m.tool_calls[0];
      header(p, "assistant");
      p.text("{\"name\": \"" + c.name + "\", \"parameters\": " + c.arguments + "}", true);
      p.special(kEot, true);
      return;
    }
    const bool reply = m.role == "assistant";
    header(p, m.role);
    p.text(py_trim(m.content), reply);
    p.special(kEot, reply);
  }
};

}  // namespace

const ChatTemplate& llama3_chat_template() {
  static const Llama3Chat kTemplate;
  return kTemplate;
}

}  // namespace kiln::text
