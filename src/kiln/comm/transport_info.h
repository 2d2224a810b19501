// What a group's transport is, as its communicator knows it (Communicator::transport_info()):
// the library, the network between ranks and what rides beside it. A plain value: whoever needs
// to know what a group delivers (dist.require_transport and `kiln doctor --require` through
// transport.h, the memory plan's shared memory lane) reads its fields, never a text.
// transport_text() is its one formatting, the text run_meta.json, the log, `kiln doctor` and
// `kiln bench comm` show:
//   local                                   world size 1
//   gloo-tcp eth0 10.0.0.2                  Gloo over TCP (Gloo's own pairs)
//   gloo-tcp+auth eth0 10.0.0.2             kiln's authenticated pairs (auth_tcp/)
//   gloo-tcp lo 127.0.0.1 shm staged        ... the shared memory lane; device buffers staged
//   nccl socket eth0 10.0.0.2 p2p           NCCL's socket net, its intra-node paths after it
//   nccl efa (aws-ofi-nccl) p2p shm         a net plugin's, in parentheses
//   nccl ib mlx5_0                          NCCL's IB net and its first HCA
//   nccl ? (NCCL_DEBUG set ...)             a note, in parentheses, ends any of them
//   none (memory plan)                      a communicator that moves nothing
#pragma once

#include <array>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/named_values.h"

namespace kiln {

// The library that moves a group's data.
enum class CommLibrary { kLocal, kGloo, kNccl, kNone };
inline constexpr std::array<Named<CommLibrary>, 4> kCommLibraryNames = {{
    {CommLibrary::kLocal, "local"},
    {CommLibrary::kGloo, "gloo"},
    {CommLibrary::kNccl, "nccl"},
    {CommLibrary::kNone, "none"},
}};

// TransportInfo::net values kiln itself decides on (NCCL names others: "ib", a plugin's).
inline constexpr std::string_view kNetSocket = "socket";  // TCP sockets
inline constexpr std::string_view kNetEfa = "efa";        // libfabric's efa provider

// Every member has an initializer, so designated initializers may name only some.
struct TransportInfo {
  CommLibrary library = CommLibrary::kNone;
  // The network between ranks: "socket" (TCP: every Gloo group, NCCL's socket net), "ib"
  // (NCCL's InfiniBand net), "efa" (aws-ofi-nccl over libfabric's efa provider), "libfabric"
  // (aws-ofi-nccl, provider not reported), another NCCL net plugin's name lower-cased;
  // "" : no network (local, none) or not known (NCCL's log said nothing).
  std::string net{};
  // The socket net's interface ("eth0", "lo"; Gloo: "?" when no interface has the address it
  // bound) or the IB net's first HCA ("mlx5_0"); "" when not reported.
  std::string iface{};
  std::string address{};  // the address on it ("10.0.0.2", "127.0.0.1"); "" when not reported
  std::string plugin{};   // NCCL's net plugin ("aws-ofi-nccl"); "" : NCCL's internal nets, not NCCL
  bool authenticated = false;  // Gloo: every pair proved the job's token (auth_tcp/)
  // Gloo: the group's bulk collectives go through the same-host shared memory lane
  // (shm_lane.h). NCCL's own "shm" intra-node path is in `intra`, not here.
  bool shm_lane = false;
  bool staged = false;  // Gloo: device buffers staged through pinned host memory
  // NCCL's intra-node paths seen, in first-seen order: "p2p", "shm", "nvls".
  std::vector<std::string> intra{};
  // Said last, in parentheses: why the rest is unknown, or what the group is for.
  std::string note{};

  bool operator==(const TransportInfo&) const = default;
};

// The one text of a transport (the forms above).
std::string transport_text(const TransportInfo& t);

// True when the transport's address is a loopback one (interface lo, 127.0.0.0/8, ::1).
bool transport_is_loopback(const TransportInfo& t);

// Every field as a JSON object (run_meta's exchange between ranks, `kiln doctor --json`), and
// back; a missing or mistyped field fails naming `what` and the field.
nlohmann::json transport_info_json(const TransportInfo& t);
TransportInfo transport_info_from_json(const nlohmann::json& j, const std::string& what);

}  // namespace kiln
