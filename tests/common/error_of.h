// The one line a kiln::Error carries, for tests of error messages.
#pragma once

#include <string>
#include <utility>

#include "kiln/base/error.h"

namespace kiln::testing {

// What `f()` throws as a kiln::Error, or "" when it returns.
template <typename F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace kiln::testing
