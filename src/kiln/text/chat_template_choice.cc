#include "kiln/text/chat_template_choice.h"

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/text/published_templates.h"

namespace kiln {

std::string chat_template_choices() {
  const std::vector<std::string>& n = chat_template_names();
  std::string out;
  for (size_t i = 0; i < n.size(); ++i) {
    if (i > 0) out += i + 1 == n.size() ? " or " : ", ";
    out += n[i];
  }
  return out;
}

namespace {

// tokenizer_config.json's (or chat_template.json's) "chat_template": a string, or the entry
// named "default" of a list of {"name", "template"}; empty when absent.
std::string template_field(const fs::path& file) {
  const Json cfg = parse_json(read_file(file), file.string());
  if (!cfg.is_object()) fail("{}: expected a JSON object", file.string());
  const auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const Json& entry : *it) {
      if (entry.is_object() && entry.value("name", std::string()) == "default" &&
          entry.contains("template") && entry.at("template").is_string()) {
        return entry.at("template").get<std::string>();
      }
    }
    fail("{}: chat_template is a list without a \"default\" entry", file.string());
  }
  fail("{}: chat_template is a JSON {}, expected a string or a list", file.string(),
       it->type_name());
}

}  // namespace

ModelChatTemplate model_chat_template(const fs::path& path) {
  std::error_code ec;
  const fs::path dir = fs::is_directory(path, ec) ? path : path.parent_path();
  ModelChatTemplate t;
  if (const fs::path jinja = dir / "chat_template.jinja"; fs::is_regular_file(jinja, ec)) {
    t.where = jinja.string();
    t.text = read_file(jinja);
  } else {
    for (const char* name : {"chat_template.json", "tokenizer_config.json"}) {
      const fs::path file = dir / name;
      if (!fs::is_regular_file(file, ec)) continue;
      t.text = template_field(file);
      if (!t.text.empty()) {
        t.where = file.string();
        break;
      }
    }
  }
  if (!t.where.empty()) t.known = identify_chat_template(t.text);
  return t;
}

const ChatTemplate& choose_chat_template(const fs::path& dir, std::string_view setting,
                                         std::string_view key) {
  if (!setting.empty()) {
    const ChatTemplate* named = chat_template_named(setting);
    if (!named) fail("{} is '{}', expected {}", key, setting, chat_template_choices());
    return *named;
  }
  const ModelChatTemplate own = model_chat_template(dir);
  if (own.known) return chat_template(*own.known);
  if (own.where.empty()) return chat_template(ChatTemplateId::kQwen25);
  fail("{}: its chat template is not one kiln knows; set {} to the one it renders ({})", own.where,
       key, chat_template_choices());
}

}  // namespace kiln
