// Runs the kiln binary built next to the tests and captures its output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace kiln::testing {

struct CmdResult {
  int code;
  std::string out;  // stdout and stderr together
};

// Runs the shell command `cmd` and returns its exit code (128 when it did not exit) and its
// stdout. The one popen runner of the tests.
inline CmdResult run_shell(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, out};
}

// The kiln binary built next to the tests, as a shell word.
inline std::string kiln_binary() { return std::string(KILN_BINARY_DIR) + "/bin/kiln"; }

// `env`: assignments placed before the command, e.g. "KILN_FAULT=1:3:exit".
inline CmdResult run_kiln(const std::string& args, const std::string& env = "") {
  return run_shell(env + " " + kiln_binary() + " " + args + " 2>&1");
}

}  // namespace kiln::testing
