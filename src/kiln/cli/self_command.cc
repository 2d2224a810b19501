#include "kiln/cli/self_command.h"

#include <unistd.h>

#include "kiln/base/error.h"

namespace kiln::cli {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string self_command(const std::string& what) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) fail("{}: cannot read /proc/self/exe", what);
  exe[n] = '\0';
  return shell_quote(exe);
}

}  // namespace kiln::cli
