#include "kiln/text/published_templates.h"

#include <array>

#include "kiln/base/error.h"
#include "kiln/text/chat_template_texts.h"  // generated: kTemplate<name>, kTemplate<name>Size

namespace kiln {

namespace {

std::string_view view(const unsigned char* bytes, size_t size) {
  return {reinterpret_cast<const char*>(bytes), size};
}

std::string_view trim_end(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

std::span<const PublishedChatTemplate> published_chat_templates() {
  static const std::array<PublishedChatTemplate, 5> kTemplates = {{
      {"qwen2.5.jinja", ChatTemplateId::kQwen25, view(kTemplateqwen25, kTemplateqwen25Size)},
      {"qwen3.jinja", ChatTemplateId::kQwen3, view(kTemplateqwen3, kTemplateqwen3Size)},
      {"qwen3-2504.jinja", ChatTemplateId::kQwen3,
       view(kTemplateqwen32504, kTemplateqwen32504Size)},
      {"llama3.1.jinja", ChatTemplateId::kLlama3, view(kTemplatellama31, kTemplatellama31Size)},
      {"llama3.2.jinja", ChatTemplateId::kLlama3, view(kTemplatellama32, kTemplatellama32Size)},
  }};
  return kTemplates;
}

std::optional<ChatTemplateId> identify_chat_template(std::string_view jinja) {
  for (const PublishedChatTemplate& t : published_chat_templates()) {
    if (trim_end(t.text) == trim_end(jinja)) return t.renderer;
  }
  return std::nullopt;
}

std::string_view published_jinja(ChatTemplateId id) {
  const std::string_view file = id == ChatTemplateId::kQwen25  ? "qwen2.5.jinja"
                                : id == ChatTemplateId::kQwen3 ? "qwen3.jinja"
                                                               : "llama3.1.jinja";
  for (const PublishedChatTemplate& t : published_chat_templates()) {
    if (t.file == file) return t.text;
  }
  KILN_CHECK(false, "no published text for chat template {}", static_cast<int>(id));
  return {};
}

}  // namespace kiln
