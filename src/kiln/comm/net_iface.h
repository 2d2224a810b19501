// Network interface discovery and choice for the socket transports (Gloo TCP now). Which NIC a
// worker binds decides whether peers on other hosts can reach it at all, so the choice is
// explicit, follows NCCL_SOCKET_IFNAME's syntax (users already know it) and is recorded.
#pragma once

#include <string>
#include <vector>

namespace kiln {

struct NetIface {
  std::string name;     // "eth0"
  std::string address;  // IPv4, dotted quad: "10.0.0.2"
  bool is_loopback = false;
  bool is_up = false;
};

// The host's interfaces that carry an IPv4 address, in getifaddrs order, one entry per name
// (its first IPv4 address).
std::vector<NetIface> list_interfaces();

// Chooses the interface to bind. `spec` is KILN_SOCKET_IFNAME (NCCL_SOCKET_IFNAME syntax):
// comma-separated name prefixes ("eth,ib"); a leading '^' makes it an exclude list ("^docker,lo");
// a leading '=' (after any '^') makes the entries exact names ("=eth0", "^=docker0"). Only
// interfaces that are up count. An empty spec takes the first non-loopback interface (skipping
// docker, virbr and veth bridges) when peers are on other hosts, loopback when all are local.
// Never returns loopback when `peers_remote`: other hosts cannot reach 127.0.0.1. Throws
// kiln::Error naming the spec and the interfaces available when nothing fits.
std::string choose_interface(const std::string& spec, bool peers_remote,
                             const std::vector<NetIface>& available);

// True when `spec` (syntax above) admits the interface called `name`, up or not: what
// `kiln doctor` uses to spot a spec that lets loopback in.
bool interface_selected(const std::string& spec, const std::string& name);

}  // namespace kiln
