// Chat templates: a conversation rendered exactly as a model's published Jinja template renders it
// through transformers' apply_chat_template, natively, one renderer per template behind one
// interface:
//
//   qwen2.5  Qwen2.5-Instruct's ChatML, its default system prompt, tools (qwen25_chat.cc)
//   qwen3    Qwen3's ChatML with thinking blocks and tools (qwen3_chat.cc)
//   llama3   Llama 3.1 / 3.2 Instruct's headers, dated system block, tools (llama3_chat.cc)
//
// A rendering is a list of pieces (text, or one of the template's special tokens) whose texts
// joined are the template's output byte for byte (tests/fixtures/data/chat_template_*.jsonl,
// made by tools/chat_template_ref.py from the texts in assets/chat_templates/). `reply` marks
// what the model produces after the generation prompt; training takes loss there. Which template
// a model uses: chat_template_choice.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/json.h"
#include "kiln/text/tokenizer.h"

namespace kiln {

struct ToolCall {
  std::string name;
  std::string arguments;  // the arguments object as `tojson` renders it
  // The string as given when the arguments came as a JSON string (OpenAI's form): Qwen3's
  // template renders such a string as it is, the others render the object.
  std::optional<std::string> arguments_text = std::nullopt;
  bool operator==(const ToolCall&) const = default;
};

struct ChatMessage {
  std::string role;  // system, user, assistant or tool
  std::string content;
  std::vector<ToolCall> tool_calls = {};  // assistant only
  // An assistant's reasoning given apart from its content (Qwen3 renders it in a think block).
  std::optional<std::string> reasoning_content = std::nullopt;
  bool operator==(const ChatMessage&) const = default;
};

// A piece of a rendered chat: text, or one of the template's own special tokens (its text, e.g.
// "<|im_start|>", "<|eot_id|>"), which encodes as that token whatever the tokenizer options.
struct ChatPiece {
  enum class Kind { kText, kSpecial };
  Kind kind = Kind::kText;
  std::string text;
  bool reply = false;  // produced by the model after the generation prompt
  bool operator==(const ChatPiece&) const = default;
};

struct ChatOptions {
  bool add_generation_prompt = false;
  // Qwen3's thinking switch; unset means the template's default (on). Off: the generation
  // prompt ends with an empty think block, and in training a turn's empty think block is part of
  // the prompt (no loss), as the model sees it at inference. Set for a template without thinking
  // it is an error.
  std::optional<bool> enable_thinking = std::nullopt;
  // Llama 3's "Today Date: ..."; empty is the template's default, "26 Jul 2024".
  std::string date_string = {};
};

enum class ChatTemplateId { kQwen25, kQwen3, kLlama3 };

class ChatTemplate {
 public:
  virtual ~ChatTemplate() = default;
  virtual ChatTemplateId id() const = 0;
  // "qwen2.5", "qwen3", "llama3": the recipe's data.template value.
  virtual std::string_view name() const = 0;
  // The pieces of `messages` with `tools` (each tool's definition). Throws kiln::Error, one line
  // naming the message and field, for what the template cannot render (a field it would drop, a
  // second tool call where it takes one, ...).
  virtual std::vector<ChatPiece> pieces(const std::vector<ChatMessage>& messages,
                                        const std::vector<OrderedJson>& tools,
                                        const ChatOptions& options) const = 0;
  // The tokens that end a reply: generation stops at any of them.
  virtual std::vector<std::string_view> stop_tokens() const = 0;
  // Whether it has a thinking mode that ChatOptions::enable_thinking switches (Qwen3).
  virtual bool has_thinking() const { return false; }
  // The date its system block shows when ChatOptions::date_string is empty (Llama 3's "Today
  // Date: 26 Jul 2024"); empty for a template without a date.
  virtual std::string_view default_date() const { return {}; }
  // The published Jinja text written into an exported model whose base has no chat template.
  virtual std::string_view jinja() const = 0;
};

const ChatTemplate& chat_template(ChatTemplateId id);
// "qwen2.5" | "qwen3" | "llama3"; nullptr for anything else.
const ChatTemplate* chat_template_named(std::string_view name);
// Every template's name, for messages and option checks.
const std::vector<std::string>& chat_template_names();

std::string render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                        const std::vector<OrderedJson>& tools, const ChatOptions& options);

// The ids of the rendered conversation. Never the tokenizer's post-processor tokens (HF's
// apply_chat_template tokenizes with add_special_tokens=False: Llama 3's template renders its
// own <|begin_of_text|>). With parse_special_in_content this is tokenizer.encode(render_chat(...)).
// Without, only the template's own special tokens are special: special-token text inside a
// message is encoded as plain text, so a message cannot forge a turn.
std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                                 const std::vector<ChatMessage>& messages,
                                 const std::vector<OrderedJson>& tools, const ChatOptions& options,
                                 bool parse_special_in_content = true);

// A kiln::Error "<key>: the llama3 chat template has no thinking mode" when enable_thinking is set
// for a template without one.
void check_enable_thinking(const ChatTemplate& tmpl, const std::optional<bool>& enable_thinking,
                           std::string_view key);

// The id of one of a template's special tokens; a kiln::Error naming the tokenizer when it lacks
// it ("...: no <|im_start|> token, which the qwen2.5 chat template needs").
int32_t chat_special_token(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                           std::string_view token);

}  // namespace kiln
