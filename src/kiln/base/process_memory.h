// This process's resident memory, from /proc/self/status (Linux); 0 where it cannot be read.
#pragma once

#include <cstddef>

namespace kiln {

size_t resident_bytes();       // VmRSS: now
size_t peak_resident_bytes();  // VmHWM: the high-water mark since the process started

}  // namespace kiln
