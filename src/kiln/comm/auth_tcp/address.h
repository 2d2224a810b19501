// The address an authenticated pair publishes through the rendezvous store: where its device
// listens (IP and port), which context on that device the pair belongs to and the rank of the
// pair's own side, so the peer that connects can say which pair it wants in its hello.
#pragma once

#include <gloo/transport/address.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::auth_tcp {

struct PairAddress {
  sockaddr_storage listener{};  // the device's listening socket (IPv4 or IPv6)
  uint64_t context_id = 0;      // the context on that device (Device::createContext order)
  int32_t rank = 0;             // the rank of the side that published it
};

// Fixed-size wire form (well under gloo::transport::Address::kMaxByteSize).
std::vector<char> encode_address(const PairAddress& a);
// Throws kiln::Error on bytes that are not an encoded PairAddress.
PairAddress decode_address(const std::vector<char>& bytes);
// "10.0.0.2:41234" (IPv6 in brackets).
std::string sockaddr_text(const sockaddr_storage& ss);

class Address final : public gloo::transport::Address {
 public:
  explicit Address(PairAddress a) : a_(a) {}
  std::string str() const override;
  std::vector<char> bytes() const override { return encode_address(a_); }
  const PairAddress& value() const { return a_; }

 private:
  PairAddress a_;
};

}  // namespace kiln::auth_tcp
