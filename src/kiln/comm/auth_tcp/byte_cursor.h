// Fixed-size fields in and out of a byte buffer (the pair address and the handshake's hello),
// in host byte order: both ends of a pair run the same kiln on the same architecture.
#pragma once

#include <cstring>

namespace kiln::auth_tcp {

// Writes v at p and moves p past it. Byte is char or uint8_t.
template <typename Byte, typename T>
void put_field(Byte*& p, const T& v) {
  std::memcpy(p, &v, sizeof v);
  p += sizeof v;
}

// Reads a T at p and moves p past it.
template <typename T, typename Byte>
T take_field(const Byte*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

}  // namespace kiln::auth_tcp
