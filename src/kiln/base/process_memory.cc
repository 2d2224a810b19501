#include "kiln/base/process_memory.h"

#include <cstdio>
#include <cstring>

namespace kiln {

namespace {

// A "Name:   1234 kB" line of /proc/self/status, in bytes.
size_t status_bytes(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kb = 0;
  const size_t len = std::strlen(field);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, field, len) == 0 && line[len] == ':') {
      if (std::sscanf(line + len + 1, "%zu", &kb) == 1) break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

}  // namespace

size_t resident_bytes() { return status_bytes("VmRSS"); }
size_t peak_resident_bytes() { return status_bytes("VmHWM"); }

}  // namespace kiln
