// Errors: recoverable failures throw kiln::Error with context; invariants use KILN_CHECK.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kiln {

// A user-facing failure: bad input, missing file, I/O error. The message is one line that names
// the file, tensor, field or rank concerned. The CLI prints it and exits non-zero.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void check_failed(const char* expr, const char* file, int line,
                               const std::string& msg);

}  // namespace kiln

// Internal invariant: a failure is a bug in kiln, not in the input.
#define KILN_CHECK(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond)) ::kiln::check_failed(#cond, __FILE__, __LINE__, fmt::format("" __VA_ARGS__)); \
  } while (0)
