#include "kiln/base/random_token.h"

#include <fmt/format.h>

#include <fstream>

#include "kiln/base/error.h"

namespace kiln {

std::string random_token() {
  unsigned char b[16] = {};
  std::ifstream f("/dev/urandom", std::ios::binary);
  f.read(reinterpret_cast<char*>(b), sizeof b);
  if (!f) fail("agent: cannot read /dev/urandom for the job token");
  std::string hex;
  for (unsigned char c : b) hex += fmt::format("{:02x}", c);
  return hex;
}

}  // namespace kiln
