#include "kiln/text/tojson.h"

#include "kiln/base/error.h"

namespace kiln {

namespace {

void append(const OrderedJson& j, std::string& out) {
  switch (j.type()) {
    case OrderedJson::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : j.items()) {
        if (!first) out += ", ";
        first = false;
        append(OrderedJson(key), out);
        out += ": ";
        append(value, out);
      }
      out += '}';
      return;
    }
    case OrderedJson::value_t::array: {
      out += '[';
      for (size_t i = 0; i < j.size(); ++i) {
        if (i > 0) out += ", ";
        append(j[i], out);
      }
      out += ']';
      return;
    }
    default:
      // Scalars: nlohmann's escapes (\" \\ \b \f \n \r \t, \u00xx for other control
      // characters) and shortest round-trip numbers are json.dumps's.
      try {
        out += j.dump(-1, ' ', false, OrderedJson::error_handler_t::strict);
      } catch (const OrderedJson::exception& e) {
        fail("a string is not valid UTF-8: {}", e.what());
      }
  }
}

}  // namespace

std::string tojson(const OrderedJson& j) {
  std::string out;
  append(j, out);
  return out;
}

}  // namespace kiln
