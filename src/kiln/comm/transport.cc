#include "kiln/comm/transport.h"

namespace kiln {

namespace {

// TCP between the ranks: every Gloo group, and NCCL's socket net.
bool is_tcp(const TransportInfo& t) {
  return (t.library == CommLibrary::kGloo || t.library == CommLibrary::kNccl) &&
         t.net == kNetSocket;
}

}  // namespace

bool transport_satisfies(const TransportInfo& transport, TransportKind kind) {
  switch (kind) {
    case TransportKind::kGlooTcp:
      return transport.library == CommLibrary::kGloo && is_tcp(transport);
    case TransportKind::kSocket:
      return is_tcp(transport) && !transport_is_loopback(transport);
    case TransportKind::kLoopback:
      return is_tcp(transport) && transport_is_loopback(transport);
    case TransportKind::kEfa:
      return transport.library == CommLibrary::kNccl && transport.net == kNetEfa;
  }
  return false;
}

bool transport_satisfies(const TransportInfo& transport, const std::string& kind) {
  return transport_satisfies(transport, parse_named(kTransportKindNames, kind, "transport"));
}

}  // namespace kiln
