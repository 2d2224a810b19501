// Re-running this very binary as a child process (the benchmarks' rows, each in a fresh process
// so its peak memory is its own): its path from /proc/self/exe, and shell quoting.
#pragma once

#include <string>

namespace kiln::cli {

// `s` in single quotes for /bin/sh.
std::string shell_quote(const std::string& s);

// This executable's path, shell-quoted. kiln::Error naming `what` when it cannot be read.
std::string self_command(const std::string& what);

}  // namespace kiln::cli
