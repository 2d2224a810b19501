#include "kiln/base/error.h"

namespace kiln {

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  throw Error(fmt::format("internal check failed: {} at {}:{}{}{}", expr, file, line,
                          msg.empty() ? "" : ": ", msg));
}

}  // namespace kiln
