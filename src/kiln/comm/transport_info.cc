#include "kiln/comm/transport_info.h"

#include <fmt/format.h>

#include "kiln/base/error.h"
#include "kiln/base/json.h"

namespace kiln {

namespace {

std::string gloo_text(const TransportInfo& t) {
  return fmt::format("gloo-tcp{} {} {}{}{}", t.authenticated ? "+auth" : "", t.iface, t.address,
                     t.shm_lane ? " shm" : "", t.staged ? " staged" : "");
}

std::string nccl_text(const TransportInfo& t) {
  std::string out = "nccl " + (t.net.empty() ? std::string("?") : t.net);
  if (!t.iface.empty()) out += " " + t.iface;
  if (!t.address.empty()) out += " " + t.address;
  if (!t.plugin.empty()) out += " (" + t.plugin + ")";
  for (const auto& p : t.intra) out += " " + p;
  return out;
}

// The field `key` of object `j`, which must hold the JSON type `type`.
const Json& field(const Json& j, const char* key, Json::value_t type, const char* type_name,
                  const std::string& what) {
  const auto it = j.find(key);
  if (it == j.end()) fail("{}: missing field '{}'", what, key);
  if (it->type() != type) fail("{}: field '{}' is not {}", what, key, type_name);
  return *it;
}

std::string text_field(const Json& j, const char* key, const std::string& what) {
  return field(j, key, Json::value_t::string, "a string", what).get<std::string>();
}

bool flag_field(const Json& j, const char* key, const std::string& what) {
  return field(j, key, Json::value_t::boolean, "true or false", what).get<bool>();
}

}  // namespace

std::string transport_text(const TransportInfo& t) {
  std::string out;
  switch (t.library) {
    case CommLibrary::kLocal:
      out = "local";
      break;
    case CommLibrary::kGloo:
      out = gloo_text(t);
      break;
    case CommLibrary::kNccl:
      out = nccl_text(t);
      break;
    case CommLibrary::kNone:
      out = "none";
      break;
  }
  if (!t.note.empty()) out += " (" + t.note + ")";
  return out;
}

bool transport_is_loopback(const TransportInfo& t) {
  return t.iface == "lo" || t.address == "::1" || t.address.starts_with("127.");
}

Json transport_info_json(const TransportInfo& t) {
  return {
      {"library", name_of(kCommLibraryNames, t.library)},
      {"net", t.net},
      {"iface", t.iface},
      {"address", t.address},
      {"plugin", t.plugin},
      {"authenticated", t.authenticated},
      {"shm_lane", t.shm_lane},
      {"staged", t.staged},
      {"intra", t.intra},
      {"note", t.note},
  };
}

TransportInfo transport_info_from_json(const Json& j, const std::string& what) {
  if (!j.is_object()) fail("{}: expected a JSON object, got {}", what, j.type_name());
  TransportInfo t;
  t.library = parse_named(kCommLibraryNames, text_field(j, "library", what), what + ": library");
  t.net = text_field(j, "net", what);
  t.iface = text_field(j, "iface", what);
  t.address = text_field(j, "address", what);
  t.plugin = text_field(j, "plugin", what);
  t.authenticated = flag_field(j, "authenticated", what);
  t.shm_lane = flag_field(j, "shm_lane", what);
  t.staged = flag_field(j, "staged", what);
  for (const Json& p : field(j, "intra", Json::value_t::array, "an array", what)) {
    if (!p.is_string()) fail("{}: field 'intra' holds a non-string", what);
    t.intra.push_back(p.get<std::string>());
  }
  t.note = text_field(j, "note", what);
  return t;
}

}  // namespace kiln
