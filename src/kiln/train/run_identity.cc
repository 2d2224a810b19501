#include "kiln/train/run_identity.h"

#include <yaml-cpp/yaml.h>

#include "kiln/base/error.h"
#include "kiln/base/json.h"

namespace kiln {

namespace {
// The value of a dotted key in recipe_to_yaml's document, as YAML text; "none" for a key of a
// section the recipe does not have (lora, in a full fine-tuning run).
std::string value_of(const YAML::Node& doc, const std::string& key) {
  const size_t dot = key.find('.');
  const YAML::Node section = doc[key.substr(0, dot)];
  if (!section.IsDefined()) return "none";
  const YAML::Node v = section[key.substr(dot + 1)];
  YAML::Emitter out;
  out << YAML::Flow << v;
  return out.c_str();
}
}  // namespace

std::vector<std::pair<std::string, std::string>> run_identity_values(const Recipe& r) {
  const YAML::Node doc = YAML::Load(recipe_to_yaml(r));
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& key : run_identity_keys()) out.emplace_back(key, value_of(doc, key));
  return out;
}

std::optional<RecipeKeyChange> run_identity_change(const Recipe& before, const Recipe& after) {
  const YAML::Node a = YAML::Load(recipe_to_yaml(before)), b = YAML::Load(recipe_to_yaml(after));
  for (const std::string& key : run_identity_keys()) {
    std::string va = value_of(a, key), vb = value_of(b, key);
    if (va != vb) return RecipeKeyChange{key, std::move(va), std::move(vb)};
  }
  return std::nullopt;
}

Recipe checkpoint_recipe(const fs::path& checkpoint_dir) {
  const fs::path manifest = checkpoint_dir / "manifest.json";
  const Json m = read_json_file(manifest);
  if (!m.contains("recipe") || !m["recipe"].is_string()) {
    fail("{}: no \"recipe\" (the recipe this checkpoint was written with)", manifest.string());
  }
  try {
    return parse_recipe(m["recipe"].get<std::string>(), manifest.string() + " recipe", {}, {});
  } catch (const Error& e) {
    fail("{}: its recipe does not load: {}", manifest.string(), e.what());
  }
}

}  // namespace kiln
