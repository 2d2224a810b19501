#include "kiln/text/tojson.h"

#include "kiln/base/error.h"

namespace kiln {

namespace {

// Python's json.dumps layout: with indent < 0 one line, ", " and ": "; with indent >= 0 each
// element of a non-empty object or array on its own line, indented `indent` spaces a level,
// "," and ": ".
void append(const OrderedJson& j, int indent, int level, std::string& out) {
  const bool object = j.type() == OrderedJson::value_t::object;
  if (object || j.type() == OrderedJson::value_t::array) {
    out += object ? '{' : '[';
    const auto newline = [&](int depth) {
      if (indent < 0) return;
      out += '\n';
      out.append(static_cast<size_t>(indent * depth), ' ');
    };
    bool first = true;
    for (const auto& [key, value] : j.items()) {
      if (!first) out += indent < 0 ? ", " : ",";
      first = false;
      newline(level + 1);
      if (object) {
        append(OrderedJson(key), indent, level + 1, out);
        out += ": ";
      }
      append(value, indent, level + 1, out);
    }
    if (!first) newline(level);
    out += object ? '}' : ']';
    return;
  }
  // Scalars: nlohmann's escapes (\" \\ \b \f \n \r \t, \u00xx for other control characters)
  // and shortest round-trip numbers are json.dumps's.
  try {
    out += j.dump(-1, ' ', false, OrderedJson::error_handler_t::strict);
  } catch (const OrderedJson::exception& e) {
    fail("a string is not valid UTF-8: {}", e.what());
  }
}

}  // namespace

std::string tojson(const OrderedJson& j, int indent) {
  std::string out;
  append(j, indent, 0, out);
  return out;
}

}  // namespace kiln
