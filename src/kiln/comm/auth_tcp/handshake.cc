#include "kiln/comm/auth_tcp/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cerrno>
#include <cstring>

#include "kiln/base/error.h"
#include "kiln/comm/auth_tcp/byte_cursor.h"
#include "kiln/comm/auth_tcp/socket_io.h"

namespace kiln::auth_tcp {

namespace {

constexpr char kHelloMagic[8] = {'K', 'I', 'L', 'N', 'P', 'A', 'I', 'R'};
constexpr char kMacLabel[] = "kiln gloo pair v1";

}  // namespace

std::array<uint8_t, kHelloBytes> encode_hello(const Hello& h) {
  std::array<uint8_t, kHelloBytes> out{};
  uint8_t* p = out.data();
  std::memcpy(p, kHelloMagic, sizeof kHelloMagic);
  p += sizeof kHelloMagic;
  put_field(p, h.context_id);
  put_field(p, h.from_rank);
  put_field(p, h.to_rank);
  std::memcpy(p, h.nonce.data(), h.nonce.size());
  return out;
}

std::optional<Hello> decode_hello(const uint8_t* bytes) {
  if (std::memcmp(bytes, kHelloMagic, sizeof kHelloMagic) != 0) return std::nullopt;
  const uint8_t* p = bytes + sizeof kHelloMagic;
  Hello h;
  h.context_id = take_field<uint64_t>(p);
  h.from_rank = take_field<uint32_t>(p);
  h.to_rank = take_field<uint32_t>(p);
  std::memcpy(h.nonce.data(), p, h.nonce.size());
  return h;
}

Nonce random_nonce() {
  Nonce n{};
  KILN_CHECK(RAND_bytes(n.data(), static_cast<int>(n.size())) == 1,
             "auth_tcp: OpenSSL has no random bytes for a handshake nonce");
  return n;
}

Mac pair_mac(const std::string& token, Role role, const Hello& hello, const Nonce& listener_nonce) {
  // label, role, the hello (context, ranks, connector nonce), the listener's nonce
  std::array<uint8_t, sizeof kMacLabel + 1 + kHelloBytes + sizeof(Nonce)> msg{};
  const auto h = encode_hello(hello);
  uint8_t* p = msg.data();
  std::memcpy(p, kMacLabel, sizeof kMacLabel);
  p += sizeof kMacLabel;
  *p++ = static_cast<uint8_t>(role);
  std::memcpy(p, h.data(), h.size());
  p += h.size();
  std::memcpy(p, listener_nonce.data(), listener_nonce.size());
  Mac mac{};
  unsigned int len = 0;
  const uint8_t* ok = HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), msg.data(),
                           msg.size(), mac.data(), &len);
  KILN_CHECK(ok != nullptr && len == mac.size(), "auth_tcp: HMAC-SHA256 failed");
  return mac;
}

bool mac_matches(const Mac& expected, const uint8_t* got) {
  return CRYPTO_memcmp(expected.data(), got, expected.size()) == 0;
}

std::string connector_handshake(int fd, const std::string& token, const Hello& hello) {
  const auto h = encode_hello(hello);
  if (!write_full(fd, h.data(), h.size())) return "sending the hello: " + io_error_text(errno);
  uint8_t challenge[kChallengeBytes];
  if (!read_full(fd, challenge, sizeof challenge)) {
    return "the listener sent no challenge (" + io_error_text(errno) + ")";
  }
  Nonce theirs{};
  std::memcpy(theirs.data(), challenge, theirs.size());
  if (!mac_matches(pair_mac(token, Role::kListener, hello, theirs), challenge + theirs.size())) {
    return "the listener's MAC does not match (it holds another job token)";
  }
  const Mac proof = pair_mac(token, Role::kConnector, hello, theirs);
  if (!write_full(fd, proof.data(), proof.size())) {
    return "sending the proof: " + io_error_text(errno);
  }
  uint8_t verdict = 0;
  if (!read_full(fd, &verdict, 1) || verdict != kAccepted) {
    return "the listener rejected the connection (" + io_error_text(errno) + ")";
  }
  return "";
}

}  // namespace kiln::auth_tcp
