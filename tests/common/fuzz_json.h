// JSON-aware mutations for the fuzz regression tests of JSON formats (tokenizer.json, data
// lines, checkpoint manifests): every node of a document, and random edits at those nodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "kiln/base/json.h"

namespace kiln::testing {

// Every node of `doc` as a JSON pointer, the root first, depth first; of each array only the
// first `max_array_items` elements (and their nodes).
inline void fuzz_json_nodes(const Json& j, const Json::json_pointer& at,
                            std::vector<Json::json_pointer>& out,
                            size_t max_array_items = SIZE_MAX) {
  out.push_back(at);
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) fuzz_json_nodes(v, at / k, out, max_array_items);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size() && i < max_array_items; ++i) {
      fuzz_json_nodes(j[i], at / i, out, max_array_items);
    }
  }
}

// `doc` with one to three edits at random `nodes`: a node (the whole document, for the root)
// replaced by a random element of the array `replacements`, or, one time in four, a member
// erased from its object.
inline Json fuzz_json_edit(const Json& doc, const std::vector<Json::json_pointer>& nodes,
                           const Json& replacements, std::mt19937_64& rng) {
  Json j = doc;
  for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
    const Json::json_pointer& at = nodes[rng() % nodes.size()];
    if (!j.contains(at)) continue;
    if (at.empty()) {
      j = replacements[rng() % replacements.size()];
    } else if (rng() % 4 == 0 && j.at(at.parent_pointer()).is_object()) {
      j.at(at.parent_pointer()).erase(at.back());
    } else {
      j.at(at) = replacements[rng() % replacements.size()];
    }
  }
  return j;
}

}  // namespace kiln::testing
