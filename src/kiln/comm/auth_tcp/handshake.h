// The handshake that opens every connection of an authenticated pair: a mutual HMAC-SHA256
// challenge-response keyed by the job's token. The side that connects (the higher rank) sends a
// hello naming the context, both ranks and its nonce; the listening side answers with its nonce
// and its MAC over both nonces, the context and the ranks; the connector checks it and answers
// with its own MAC (a different role label, so one side's MAC is never valid for the other);
// the listener checks that and sends one accept byte. Neither side learns anything about the
// token from a peer that does not know it, and a recorded handshake does not verify again (fresh
// nonces). Nothing after it is authenticated or encrypted: this keeps stray and hostile
// connections out of a group, not an attacker on the path who can read or inject into the TCP
// stream.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace kiln::auth_tcp {

using Nonce = std::array<uint8_t, 32>;
using Mac = std::array<uint8_t, 32>;

struct Hello {
  uint64_t context_id = 0;  // the listener's context, from its pair address
  uint32_t from_rank = 0;   // the connector's rank in that context
  uint32_t to_rank = 0;     // the listener's rank
  Nonce nonce{};            // the connector's
};

inline constexpr size_t kHelloBytes = 8 + 8 + 4 + 4 + 32;  // magic, context, ranks, nonce
inline constexpr size_t kChallengeBytes = 32 + 32;         // listener nonce, listener MAC
inline constexpr size_t kProofBytes = 32;                  // connector MAC
inline constexpr uint8_t kAccepted = 0xa5;

enum class Role : uint8_t { kListener = 'L', kConnector = 'C' };

std::array<uint8_t, kHelloBytes> encode_hello(const Hello& h);
// nullopt when the bytes do not start with the hello's magic.
std::optional<Hello> decode_hello(const uint8_t* bytes);

// Fresh random bytes from OpenSSL's CSPRNG (throws kiln::Error when it has none).
Nonce random_nonce();
Mac pair_mac(const std::string& token, Role role, const Hello& hello, const Nonce& listener_nonce);
// Constant-time comparison (CRYPTO_memcmp).
bool mac_matches(const Mac& expected, const uint8_t* got);

// The connector's side on a connected blocking socket (the caller bounds it with
// set_io_timeout). Empty on success, else why it failed: the listener's MAC does not match
// (another token), the listener closed the connection (it rejected ours), a timeout.
std::string connector_handshake(int fd, const std::string& token, const Hello& hello);

}  // namespace kiln::auth_tcp
