// A line of kernel source: where an emulated thread synchronised (a barrier or a warp operation),
// for fault messages. The device functions take it as default arguments __builtin_FILE() and
// __builtin_LINE(), which both gcc and clang evaluate at the call (std::source_location needs a
// builtin clang 14 lacks).
#pragma once

#include <cstring>

namespace kiln::emul {

struct Site {
  const char* file = "";
  int line = 0;
  bool operator==(const Site& o) const {
    return line == o.line && (file == o.file || std::strcmp(file, o.file) == 0);
  }
};

}  // namespace kiln::emul
