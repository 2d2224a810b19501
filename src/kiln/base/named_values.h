// Enum-like settings with their names, listed once: a table of {value, name} pairs is the only
// place a setting's allowed values are written; parsing, printing and the error for a bad value
// ("<what>: 'x' is not one of a, b, c") all read it.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "kiln/base/error.h"

namespace kiln {

template <typename E>
struct Named {
  E value;
  const char* name;
};

// "a, b, c": the table's names in order, for help texts and errors.
template <typename E, size_t N>
std::string allowed_names(const std::array<Named<E>, N>& table) {
  std::string out;
  for (const auto& n : table) {
    if (!out.empty()) out += ", ";
    out += n.name;
  }
  return out;
}

// The value named `name`; otherwise fails with one line naming `what` (the file and key) and the
// allowed names.
template <typename E, size_t N>
E parse_named(const std::array<Named<E>, N>& table, std::string_view name,
              const std::string& what) {
  for (const auto& n : table)
    if (name == n.name) return n.value;
  fail("{}: '{}' is not one of {}", what, name, allowed_names(table));
}

template <typename E, size_t N>
bool is_named(const std::array<Named<E>, N>& table, std::string_view name) {
  for (const auto& n : table)
    if (name == n.name) return true;
  return false;
}

template <typename E, size_t N>
const char* name_of(const std::array<Named<E>, N>& table, E value) {
  for (const auto& n : table)
    if (n.value == value) return n.name;
  KILN_CHECK(false, "a value missing from its name table");
  return "";
}

}  // namespace kiln
