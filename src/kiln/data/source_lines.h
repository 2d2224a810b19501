// The records of a data file, each with the line it starts on: one per non-blank line of JSONL,
// or, when the file's first non-blank character is '[', one per element of a JSON array (an
// alpaca-style .json file), so errors name the line either way.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/json.h"

namespace kiln {

struct SourceLine {
  size_t number;          // 1-based line of the record's first character
  std::string_view text;  // the record's JSON text (a view into the file)
  size_t column = 1;      // 1-based column (in bytes) of its first character
  // Where the record starts in the file, for parse_json's positions.
  TextPosition position() const { return {number, column}; }
};

// Throws kiln::Error "<name>:<line>: ..." for an array that is not well formed at the top level,
// a ',' before its ']' included (the elements themselves are parsed later, by whoever reads the
// records).
std::vector<SourceLine> source_lines(std::string_view text, const std::string& name);

}  // namespace kiln
