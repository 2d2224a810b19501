#include "kiln/comm/net_iface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>

#include "kiln/base/error.h"

namespace kiln {

namespace {

struct IfaceSpec {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;
};

IfaceSpec parse_spec(std::string_view s) {
  IfaceSpec spec;
  if (!s.empty() && s.front() == '^') {
    spec.exclude = true;
    s.remove_prefix(1);
  }
  if (!s.empty() && s.front() == '=') {
    spec.exact = true;
    s.remove_prefix(1);
  }
  while (!s.empty()) {
    const size_t comma = s.find(',');
    std::string_view item = s.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) spec.names.emplace_back(item);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return spec;
}

bool spec_lists(const IfaceSpec& spec, const std::string& name) {
  for (const auto& n : spec.names) {
    if (spec.exact ? name == n : name.starts_with(n)) return true;
  }
  return false;
}

// Virtual bridges exist on most hosts and rarely route to other hosts; NCCL skips docker too.
bool is_virtual_bridge(const std::string& name) {
  return name.starts_with("docker") || name.starts_with("virbr") || name.starts_with("veth");
}

std::string describe(const std::vector<NetIface>& available) {
  std::string out;
  for (const auto& i : available) {
    if (!out.empty()) out += ", ";
    out += i.name + " " + i.address + (i.is_up ? "" : " (down)");
  }
  return out.empty() ? "none" : out;
}

}  // namespace

std::vector<NetIface> list_interfaces() {
  ifaddrs* raw = nullptr;
  if (getifaddrs(&raw) != 0) fail("getifaddrs failed: {}", std::strerror(errno));
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> addrs(raw, freeifaddrs);
  std::vector<NetIface> out;
  for (const ifaddrs* a = raw; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    bool seen = false;
    for (const auto& i : out) seen = seen || i.name == a->ifa_name;
    if (seen) continue;
    char buf[INET_ADDRSTRLEN] = {};
    const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf);
    out.push_back(NetIface{a->ifa_name, buf, (a->ifa_flags & IFF_LOOPBACK) != 0,
                           (a->ifa_flags & IFF_UP) != 0 && (a->ifa_flags & IFF_RUNNING) != 0});
  }
  return out;
}

bool interface_selected(const std::string& spec_text, const std::string& name) {
  const IfaceSpec spec = parse_spec(spec_text);
  if (spec.names.empty()) return spec.exclude;  // "^" alone excludes nothing
  return spec_lists(spec, name) != spec.exclude;
}

std::string choose_interface(const std::string& spec_text, bool peers_remote,
                             const std::vector<NetIface>& available) {
  const IfaceSpec spec = parse_spec(spec_text);
  const char* where = peers_remote ? "peers are on other hosts" : "all peers are on this host";
  if (spec.names.empty()) {
    if (!spec_text.empty() && !spec.exclude)
      fail("KILN_SOCKET_IFNAME '{}' names no interface", spec_text);
    // Empty (or "^" alone): loopback is right and fastest when every peer is local.
    if (!peers_remote) {
      for (const auto& i : available) {
        if (i.is_up && i.is_loopback) return i.name;
      }
    }
    for (const auto& i : available) {
      if (i.is_up && !i.is_loopback && !is_virtual_bridge(i.name)) return i.name;
    }
    for (const auto& i : available) {
      if (i.is_up && !i.is_loopback) return i.name;
    }
    fail("no usable network interface ({}); available: {}; set KILN_SOCKET_IFNAME", where,
         describe(available));
  }
  bool loopback_matched = false;
  for (const auto& i : available) {
    if (!i.is_up || spec_lists(spec, i.name) == spec.exclude) continue;
    if (i.is_loopback && peers_remote) {
      loopback_matched = true;
      continue;
    }
    return i.name;
  }
  if (loopback_matched) {
    fail(
        "KILN_SOCKET_IFNAME '{}' matches only loopback, but {}: never loopback when peers are on "
        "other hosts; available: {}",
        spec_text, where, describe(available));
  }
  fail("KILN_SOCKET_IFNAME '{}' matches no interface that is up ({}); available: {}", spec_text,
       where, describe(available));
}

}  // namespace kiln
