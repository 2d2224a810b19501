// The recipe reader: a recipe's entries collected by dotted key from the YAML document and the
// overrides, then read into typed values by the schema's rows (recipe_schema.h). Every error is
// one line naming the entry's origin ("recipe.yaml:7" or "override 'train.seed=3'") and the key.
// Internal to the recipe (kiln_recipe); other code reads a Recipe.
#pragma once

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/named_values.h"
#include "kiln/train/recipe.h"

namespace kiln {

// "an empty value", "a list", "a map" or the scalar quoted: what a value is, for errors.
std::string describe(const YAML::Node& n);

// One key's value and where it came from ("recipe.yaml:7" or "override 'train.seed=3'").
struct Entry {
  YAML::Node node;
  std::string where;
  bool from_override = false;
  // No value, or "": a key whose empty value keeps its default.
  bool empty() const { return node.IsNull() || (node.IsScalar() && node.Scalar().empty()); }
};

// A range a value must be in: `ok` decides, `text` says it in errors ("> 0", "in [0, 1)").
template <typename T>
struct Rule {
  const char* text;
  bool (*ok)(T);
};

class RecipeReader {
 public:
  // `what` names the source in errors; a relative path in the text resolves against `base_dir`
  // (the current directory if empty), one in an override against the current directory.
  RecipeReader(std::string what, fs::path base_dir, RecipeUse use);

  const std::string& what() const { return what_; }
  RecipeUse use() const { return use_; }

  void add_document(const YAML::Node& root);
  void add_override(const std::string& text);

  // Whether the recipe has the section: in the file (even empty) or by an override of its keys.
  bool has_section(const std::string& section) const { return sections_.count(section) > 0; }

  // The entry for `key`, or nullptr when the recipe leaves it at its default.
  const Entry* find(const std::string& key);
  const Entry& require(const std::string& key);
  // Every key of the schema must have been read, so a row cannot be left out of the reading.
  void check_all_read() const;

  [[noreturn]] static void bad(const Entry& e, const std::string& key, const std::string& msg);
  static std::string scalar(const Entry& e, const std::string& key, const char* expected);
  static double to_double(const Entry& e, const std::string& key);
  // A non-empty string.
  static std::string text(const Entry& e, const std::string& key);
  // A path resolved the one way (recipe.h): absolute and normalised.
  std::string path(const Entry& e, const std::string& key) const;

  template <typename T>
  static T to_integer(const Entry& e, const std::string& key) {
    const char* expected = std::is_signed_v<T> ? "an integer" : "a non-negative integer";
    std::string s = scalar(e, key, expected);
    const char* first = s.data() + (!s.empty() && s[0] == '+');
    T v = 0;
    auto [ptr, ec] = std::from_chars(first, s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) {
      bad(e, key,
          fmt::format("'{}' is out of range (at most {})", s, std::numeric_limits<T>::max()));
    }
    if (ec != std::errc() || ptr != s.data() + s.size() || first == ptr) {
      bad(e, key, fmt::format("expected {}, got '{}'", expected, s));
    }
    return v;
  }

  // Each reads `key` into `out` when the recipe sets it, else leaves `out` (the default).
  void real(const std::string& key, double& out, Rule<double> rule);
  template <typename T>
  void integer(const std::string& key, T& out, Rule<int64_t> rule) {
    const Entry* e = find(key);
    if (!e) return;
    int64_t v = to_integer<int64_t>(*e, key);
    if (!rule.ok(v)) bad(*e, key, fmt::format("must be {}, got {}", rule.text, v));
    if constexpr (sizeof(T) < sizeof(int64_t)) {
      if (v > std::numeric_limits<T>::max()) {
        bad(*e, key,
            fmt::format("{} is out of range (at most {})", v, std::numeric_limits<T>::max()));
      }
    }
    out = static_cast<T>(v);
  }
  void unsigned_integer(const std::string& key, uint64_t& out);
  void boolean(const std::string& key, bool& out);
  void choice(const std::string& key, std::string& out, const std::vector<std::string>& valid);
  // One of `table`'s names (base/named_values.h); the error lists them in the table's order.
  template <typename E, size_t N>
  void named(const std::string& key, E& out, const std::array<Named<E>, N>& table) {
    const Entry* e = find(key);
    if (!e) return;
    const std::string s = text(*e, key);
    if (!is_named(table, s)) {
      bad(*e, key, fmt::format("invalid value '{}' (valid: {})", s, allowed_names(table)));
    }
    out = parse_named(table, s, key);
  }
  void pair(const std::string& key, std::array<double, 2>& out);
  // An optional path: empty (or no value) keeps the default.
  void optional_path(const std::string& key, std::string& out);

 private:
  std::string at(const YAML::Node& n) const;

  std::string what_;
  fs::path base_dir_;
  RecipeUse use_;
  std::map<std::string, Entry> entries_;
  std::set<std::string> read_;
  std::set<std::string> sections_;
};

}  // namespace kiln
