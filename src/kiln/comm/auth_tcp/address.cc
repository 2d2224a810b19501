#include "kiln/comm/auth_tcp/address.h"

#include <arpa/inet.h>

#include <array>
#include <cstring>

#include "kiln/base/error.h"
#include "kiln/comm/auth_tcp/byte_cursor.h"

namespace kiln::auth_tcp {

namespace {

constexpr char kMagic[4] = {'K', 'A', 'P', '1'};
// magic, family (2), port (2, network order), IP (16), context id (8), rank (4)
constexpr size_t kEncodedBytes = 4 + 2 + 2 + 16 + 8 + 4;

}  // namespace

std::vector<char> encode_address(const PairAddress& a) {
  const uint16_t family = a.listener.ss_family;
  char ip[16] = {};
  uint16_t port = 0;
  if (family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a.listener);
    port = in.sin_port;
    std::memcpy(ip, &in.sin_addr, 4);
  } else if (family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a.listener);
    port = in6.sin6_port;
    std::memcpy(ip, &in6.sin6_addr, 16);
  } else {
    fail("auth_tcp: cannot encode a listener of address family {}", family);
  }
  std::array<char, kEncodedBytes> out{};
  char* p = out.data();
  put_field(p, kMagic);
  put_field(p, family);
  put_field(p, port);
  put_field(p, ip);
  put_field(p, a.context_id);
  put_field(p, a.rank);
  return std::vector<char>(out.begin(), out.end());
}

PairAddress decode_address(const std::vector<char>& bytes) {
  KILN_CHECK(bytes.size() == kEncodedBytes && std::memcmp(bytes.data(), kMagic, 4) == 0,
             "auth_tcp: a peer published a pair address of {} bytes that is not an authenticated "
             "pair's (a rank without dist.authenticate_pairs, or another kiln version?)",
             bytes.size());
  const char* p = bytes.data() + 4;
  PairAddress a;
  const auto family = take_field<uint16_t>(p);
  const auto port = take_field<uint16_t>(p);
  const char* ip = p;
  p += 16;
  if (family == AF_INET) {
    auto& in = reinterpret_cast<sockaddr_in&>(a.listener);
    in.sin_family = AF_INET;
    in.sin_port = port;
    std::memcpy(&in.sin_addr, ip, 4);
  } else {
    KILN_CHECK(family == AF_INET6, "auth_tcp: pair address of unknown family {}", family);
    auto& in6 = reinterpret_cast<sockaddr_in6&>(a.listener);
    in6.sin6_family = AF_INET6;
    in6.sin6_port = port;
    std::memcpy(&in6.sin6_addr, ip, 16);
  }
  a.context_id = take_field<uint64_t>(p);
  a.rank = take_field<int32_t>(p);
  return a;
}

std::string sockaddr_text(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(ss);
    inet_ntop(AF_INET, &in.sin_addr, buf, sizeof buf);
    return fmt::format("{}:{}", buf, ntohs(in.sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(ss);
    inet_ntop(AF_INET6, &in6.sin6_addr, buf, sizeof buf);
    return fmt::format("[{}]:{}", buf, ntohs(in6.sin6_port));
  }
  return fmt::format("(family {})", ss.ss_family);
}

std::string Address::str() const {
  return fmt::format("{} context {} rank {}", sockaddr_text(a_.listener), a_.context_id, a_.rank);
}

}  // namespace kiln::auth_tcp
