// Which chat template renders a model's conversations, decided in one place for training data,
// eval, `kiln tokenize --chat`, `kiln generate` and the exported model:
//
//   1. `setting` ("qwen2.5" | "qwen3" | "llama3": data.template, --template) when not empty;
//   2. else the model's own template when it is one of the published texts kiln knows
//      (published_templates.h), compared by content, not by name;
//   3. else, when the model has no chat template at all, qwen2.5 (kiln's default, which an
//      exported model is then given);
//   4. else an error naming `key`.
//
// A model's template is, as transformers reads it, chat_template.jinja beside the tokenizer, else
// chat_template.json's "chat_template", else tokenizer_config.json's "chat_template" (a string, or
// the entry named "default" of a list of {"name", "template"}).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/text/chat_template.h"

namespace kiln {

// "qwen2.5, qwen3 or llama3": the settings `choose_chat_template` takes, for help texts and errors.
std::string chat_template_choices();

struct ModelChatTemplate {
  std::string where;                    // the file it was read from; empty when there is none
  std::string text;                     // the Jinja source
  std::optional<ChatTemplateId> known;  // its renderer, when it is a published text kiln knows
};

// The chat template of the model whose tokenizer files are in `dir` (a directory, or the
// tokenizer.json in one). Throws kiln::Error naming the file when one is malformed.
ModelChatTemplate model_chat_template(const std::filesystem::path& dir);

// The template to render with, by the rules above. `key` names the setting in errors
// ("data.template", "--template"):
//   ".../tokenizer_config.json: its chat template is not one kiln knows; set data.template to
//   qwen2.5, qwen3 or llama3 (the one it renders)".
const ChatTemplate& choose_chat_template(const std::filesystem::path& dir, std::string_view setting,
                                         std::string_view key);

}  // namespace kiln
