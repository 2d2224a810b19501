#include "kiln/base/json.h"

#include "kiln/base/error.h"

namespace kiln {

Json parse_json(std::string_view text, const std::string& what) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    fail("{}: malformed JSON: {}", what, e.what());
  }
}

OrderedJson parse_json_ordered(std::string_view text, const std::string& what) {
  try {
    return OrderedJson::parse(text);
  } catch (const OrderedJson::parse_error& e) {
    fail("{}: malformed JSON: {}", what, e.what());
  }
}

Json read_json_file(const fs::path& path) { return parse_json(read_file(path), path.string()); }

}  // namespace kiln
