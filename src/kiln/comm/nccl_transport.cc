#include "kiln/comm/nccl_transport.h"

#include <algorithm>
#include <cctype>

namespace kiln {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The message of one log line: what follows "NCCL INFO " (the whole line when absent).
std::string_view message(std::string_view line) {
  constexpr std::string_view kTag = "NCCL INFO ";
  const size_t at = line.find(kTag);
  return at == std::string_view::npos ? line : line.substr(at + kTag.size());
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The first device of a "[0]eth0:10.0.0.2<0> [1]..." or "[0]mlx5_0:1/IB ..." list: its name
// and what follows the colon up to '<' ("10.0.0.2"; for IB the port, not kept).
struct Device {
  std::string name, address;
};
Device first_device(std::string_view list) {
  Device d;
  const size_t open = list.find(']');
  if (open == std::string_view::npos) return d;
  std::string_view dev = list.substr(open + 1);
  dev = dev.substr(0, dev.find_first_of(" ;"));
  const size_t colon = dev.find(':');
  d.name = std::string(dev.substr(0, colon));
  if (colon != std::string_view::npos) {
    const std::string_view addr = dev.substr(colon + 1);
    d.address = std::string(addr.substr(0, addr.find('<')));
  }
  return d;
}

// What the lines said so far; the socket and IB nets both report devices before NCCL says
// which net it chose.
struct ParseState {
  TransportInfo t{.library = CommLibrary::kNccl};
  Device socket, ib;
};

void add_intra(TransportInfo& t, const std::string& path) {
  if (std::find(t.intra.begin(), t.intra.end(), path) == t.intra.end()) t.intra.push_back(path);
}

void read_line(std::string_view msg, ParseState& st) {
  TransportInfo& t = st.t;
  constexpr std::string_view kNetChosen = "Using network ";
  constexpr std::string_view kOfiProvider = "NET/OFI Selected Provider is ";
  constexpr std::string_view kSocket = "NET/Socket : Using ";
  constexpr std::string_view kIb = "NET/IB : Using ";
  constexpr std::string_view kPlugin = "NET/Plugin: Loaded net plugin ";
  if (msg.starts_with(kNetChosen)) {
    const std::string net = lower(trim(msg.substr(kNetChosen.size())));
    if (net == kNetSocket || net == "ib") {
      t.net = net;
      t.plugin.clear();
    } else if (net.find("libfabric") != std::string::npos) {
      t.plugin = "aws-ofi-nccl";
      if (t.net.empty() || t.net == kNetSocket || t.net == "ib") t.net = "libfabric";
    } else {
      t.plugin = net;
      t.net = net;
    }
  } else if (lower(msg).starts_with(lower(kOfiProvider))) {
    std::string_view p = msg.substr(kOfiProvider.size());
    t.net = lower(trim(p.substr(0, p.find_first_of(" ,;\t\r"))));
    t.plugin = "aws-ofi-nccl";
  } else if (msg.starts_with(kSocket)) {
    if (st.socket.name.empty()) st.socket = first_device(msg.substr(kSocket.size()));
  } else if (msg.starts_with(kIb)) {
    if (st.ib.name.empty()) st.ib = first_device(msg.substr(kIb.size()));
  } else if (msg.starts_with(kPlugin)) {
    std::string_view p = msg.substr(kPlugin.size());
    if (t.plugin.empty()) t.plugin = lower(trim(p.substr(0, p.find(" ("))));
  } else if (msg.starts_with("Channel ") || msg.starts_with("Ring ")) {
    const size_t via = msg.find(" via ");
    if (via == std::string_view::npos) return;
    const std::string path = lower(msg.substr(via + 5, msg.find('/', via + 5) - via - 5));
    if (path == "p2p" || path == "shm" || path == "nvls") add_intra(t, path);
  } else if (msg.starts_with("NVLS ") && msg.find("enabled") != std::string_view::npos) {
    add_intra(t, "nvls");
  }
}

}  // namespace

TransportInfo parse_nccl_transport(std::string_view log) {
  ParseState st;
  std::string_view rest = log;
  while (!rest.empty()) {
    const size_t eol = rest.find('\n');
    read_line(message(rest.substr(0, eol)), st);
    if (eol == std::string_view::npos) break;
    rest.remove_prefix(eol + 1);
  }
  TransportInfo t = std::move(st.t);
  if (t.net == kNetSocket) {
    t.iface = st.socket.name;
    t.address = st.socket.address;
  } else if (t.net == "ib") {
    t.iface = st.ib.name;  // the HCA; its port is no address
  }
  return t;
}

}  // namespace kiln
