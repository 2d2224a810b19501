#include "kiln/comm/transport.h"

#include <fmt/ranges.h>

#include <sstream>

#include "kiln/base/error.h"

namespace kiln {

namespace {

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool has_word(const std::vector<std::string>& w, const std::string& x) {
  for (const auto& v : w) {
    if (v == x) return true;
  }
  return false;
}

// Gloo over TCP: its own transport ("gloo-tcp") or kiln's authenticated one ("gloo-tcp+auth").
bool is_gloo_tcp(const std::vector<std::string>& w) {
  return !w.empty() && (w[0] == "gloo-tcp" || w[0] == "gloo-tcp+auth");
}

// TCP transports: Gloo's, and NCCL's socket net when that arrives ("nccl socket eth0 ...").
bool is_tcp(const std::vector<std::string>& w) { return is_gloo_tcp(w) || has_word(w, "socket"); }

}  // namespace

bool transport_is_loopback(const std::string& transport) {
  for (const auto& v : words(transport)) {
    if (v == "lo" || v == "::1" || v.starts_with("127.")) return true;
  }
  return false;
}

bool transport_has_shm_lane(const std::string& transport) {
  const std::vector<std::string> w = words(transport);
  return is_gloo_tcp(w) && has_word(w, "shm");
}

bool transport_satisfies(const std::string& transport, TransportKind kind) {
  const std::vector<std::string> w = words(transport);
  switch (kind) {
    case TransportKind::kGlooTcp:
      return is_gloo_tcp(w);
    case TransportKind::kSocket:
      return is_tcp(w) && !transport_is_loopback(transport);
    case TransportKind::kLoopback:
      return is_tcp(w) && transport_is_loopback(transport);
    case TransportKind::kEfa:
      return has_word(w, "efa");
  }
  return false;
}

bool transport_satisfies(const std::string& transport, const std::string& kind) {
  return transport_satisfies(transport, parse_named(kTransportKindNames, kind, "transport"));
}

}  // namespace kiln
