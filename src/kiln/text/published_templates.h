// The published chat templates kiln knows, byte for byte (assets/chat_templates/, embedded at
// build time by cmake/embed_text.cmake), and recognising a model's template by its text.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "kiln/text/chat_template.h"

namespace kiln {

struct PublishedChatTemplate {
  std::string_view file;    // "qwen3.jinja", under assets/chat_templates/
  ChatTemplateId renderer;  // the renderer that renders it byte for byte
  std::string_view text;
};

std::span<const PublishedChatTemplate> published_chat_templates();

// The renderer of `jinja` when it is one of the published texts (trailing whitespace aside);
// nullopt otherwise.
std::optional<ChatTemplateId> identify_chat_template(std::string_view jinja);

// The text kiln writes for a renderer: qwen2.5.jinja, qwen3.jinja (the current Qwen3 text) and
// llama3.1.jinja (whose default date is kiln's, where 3.2's asks for today's).
std::string_view published_jinja(ChatTemplateId id);

}  // namespace kiln
