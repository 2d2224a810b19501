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

// `env`: assignments placed before the command, e.g. "KILN_FAULT=1:3:exit".
inline CmdResult run_kiln(const std::string& args, const std::string& env = "") {
  const std::string cmd = env + " " + std::string(KILN_BINARY_DIR) + "/bin/kiln " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, out};
}

}  // namespace kiln::testing
