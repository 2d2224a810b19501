#include "kiln/train/recipe_reader.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "kiln/text/utf8.h"
#include "kiln/train/recipe_suggest.h"

namespace kiln {

namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The sections, in the keys' order: "model", "lora", "data", ...
const std::vector<std::string>& sections() {
  static const std::vector<std::string> out = [] {
    std::vector<std::string> s;
    for (const std::string& k : recipe_keys()) {
      std::string section = k.substr(0, k.find('.'));
      if (!contains(s, section)) s.push_back(std::move(section));
    }
    return s;
  }();
  return out;
}

}  // namespace

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "an empty value";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a map";
  return fmt::format("'{}'", n.Scalar());
}

RecipeReader::RecipeReader(std::string what, fs::path base_dir, RecipeUse use)
    : what_(std::move(what)), base_dir_(std::move(base_dir)), use_(use) {}

std::string RecipeReader::at(const YAML::Node& n) const {
  YAML::Mark m = n.Mark();
  return m.is_null() ? what_ : fmt::format("{}:{}", what_, m.line + 1);
}

void RecipeReader::add_document(const YAML::Node& root) {
  if (!root.IsDefined() || root.IsNull()) return;  // an empty file: defaults only
  if (!root.IsMap()) {
    fail("{}: expected a map of sections (model, data, ...), got {}", at(root), describe(root));
  }
  const std::vector<std::string>& keys = recipe_keys();
  std::map<std::string, std::string> sections_seen;
  for (const auto& it : root) {
    const YAML::Node& k = it.first;
    if (!k.IsScalar()) fail("{}: expected a section name, got {}", at(k), describe(k));
    const std::string section = k.Scalar();
    if (!contains(sections(), section)) {
      if (contains(keys, section)) {
        fail("{}: unknown key '{}' (nest it: '{}:' then '{}:')", at(k), section,
             section.substr(0, section.find('.')), section.substr(section.find('.') + 1));
      }
      fail("{}: unknown key '{}'{}", at(k), section, unknown_key_hint(section, sections()));
    }
    auto [prev, fresh] = sections_seen.emplace(section, at(k));
    if (!fresh) fail("{}: duplicate key '{}' (also at {})", at(k), section, prev->second);
    sections_.insert(section);
    const YAML::Node& v = it.second;
    if (v.IsNull()) continue;  // an empty section keeps every default
    if (!v.IsMap()) fail("{}: {}: expected a map of keys, got {}", at(k), section, describe(v));
    for (const auto& jt : v) {
      if (!jt.first.IsScalar()) {
        fail("{}: {}: expected a key name, got {}", at(jt.first), section, describe(jt.first));
      }
      const std::string key = section + "." + jt.first.Scalar();
      if (!contains(keys, key)) {
        fail("{}: unknown key '{}'{}", at(jt.first), key, unknown_key_hint(key, keys));
      }
      auto [old, added] = entries_.emplace(key, Entry{jt.second, at(jt.first)});
      if (!added) {
        fail("{}: duplicate key '{}' (also at {})", at(jt.first), key, old->second.where);
      }
    }
  }
}

void RecipeReader::add_override(const std::string& text) {
  const std::string where = fmt::format("override '{}'", text);
  size_t eq = text.find('=');
  if (eq == std::string::npos) fail("{}: expected dotted.key=value", where);
  const std::string key = text.substr(0, eq);
  if (!contains(recipe_keys(), key)) {
    fail("{}: unknown key '{}'{}", where, key, unknown_key_hint(key, recipe_keys()));
  }
  YAML::Node node;
  try {
    node = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    fail("{}: {}: malformed YAML value: {}", where, key, e.msg);
  }
  entries_[key] = Entry{node, where, true};  // later overrides win
  sections_.insert(key.substr(0, key.find('.')));
}

const Entry* RecipeReader::find(const std::string& key) {
  KILN_CHECK(contains(recipe_keys(), key), "recipe key '{}' is not in the schema", key);
  read_.insert(key);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

const Entry& RecipeReader::require(const std::string& key) {
  const Entry* e = find(key);
  if (!e) fail("{}: missing required key '{}'", what_, key);
  return *e;
}

void RecipeReader::check_all_read() const {
  for (const std::string& k : recipe_keys()) {
    KILN_CHECK(read_.count(k), "recipe key '{}' never read", k);
  }
}

void RecipeReader::bad(const Entry& e, const std::string& key, const std::string& msg) {
  fail("{}: {}: {}", e.where, key, msg);
}

std::string RecipeReader::scalar(const Entry& e, const std::string& key, const char* expected) {
  if (!e.node.IsScalar()) {
    bad(e, key, fmt::format("expected {}, got {}", expected, describe(e.node)));
  }
  // YAML text is UTF-8; an ill-formed byte would not survive recipe_to_yaml's round trip.
  if (const size_t at = text::find_invalid_utf8(e.node.Scalar()); at != std::string::npos) {
    bad(e, key, fmt::format("not valid UTF-8 (byte {} of the value)", at));
  }
  return e.node.Scalar();
}

double RecipeReader::to_double(const Entry& e, const std::string& key) {
  std::string s = scalar(e, key, "a number");
  const char* first = s.data() + (!s.empty() && s[0] == '+');
  double v = 0;
  auto [ptr, ec] = std::from_chars(first, s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || first == ptr || !std::isfinite(v)) {
    bad(e, key, fmt::format("expected a number, got '{}'", s));
  }
  return v;
}

std::string RecipeReader::text(const Entry& e, const std::string& key) {
  std::string s = scalar(e, key, "a string");
  if (s.empty()) bad(e, key, "expected a non-empty string");
  return s;
}

std::string RecipeReader::path(const Entry& e, const std::string& key) const {
  fs::path p(text(e, key));
  if (p.is_relative()) {
    // An override is typed relative to the shell's directory, a file entry to the file's.
    p = (e.from_override || base_dir_.empty() ? fs::current_path() : base_dir_) / p;
  }
  return fs::absolute(p).lexically_normal().string();
}

void RecipeReader::real(const std::string& key, double& out, Rule<double> rule) {
  const Entry* e = find(key);
  if (!e) return;
  double v = to_double(*e, key);
  if (!rule.ok(v)) bad(*e, key, fmt::format("must be {}, got {}", rule.text, e->node.Scalar()));
  out = v;
}

void RecipeReader::unsigned_integer(const std::string& key, uint64_t& out) {
  if (const Entry* e = find(key)) out = to_integer<uint64_t>(*e, key);
}

void RecipeReader::boolean(const std::string& key, bool& out) {
  const Entry* e = find(key);
  if (!e) return;
  std::string s = scalar(*e, key, "true or false");
  if (!YAML::convert<bool>::decode(e->node, out)) {
    bad(*e, key, fmt::format("expected true or false, got '{}'", s));
  }
}

void RecipeReader::choice(const std::string& key, std::string& out,
                          const std::vector<std::string>& valid) {
  const Entry* e = find(key);
  if (!e) return;
  std::string s = text(*e, key);
  if (!contains(valid, s)) {
    bad(*e, key, fmt::format("invalid value '{}' (valid: {})", s, fmt::join(valid, ", ")));
  }
  out = s;
}

void RecipeReader::pair(const std::string& key, std::array<double, 2>& out) {
  const Entry* e = find(key);
  if (!e) return;
  if (!e->node.IsSequence() || e->node.size() != 2) {
    bad(*e, key, fmt::format("expected a list of two numbers, got {}", describe(e->node)));
  }
  for (size_t i = 0; i < 2; ++i) {
    Entry item{e->node[i], e->where};
    std::string item_key = fmt::format("{}[{}]", key, i);
    double v = to_double(item, item_key);
    if (!(v >= 0 && v < 1)) bad(item, item_key, fmt::format("must be in [0, 1), got {}", v));
    out[i] = v;
  }
}

void RecipeReader::optional_path(const std::string& key, std::string& out) {
  const Entry* e = find(key);
  if (!e || e->empty()) return;
  out = path(*e, key);
}

}  // namespace kiln
