// Whether a Gloo group's pairs authenticate their connections (the recipe's
// dist.authenticate_pairs): auto, only when the group spans hosts (one host runs in a private
// network namespace, or on loopback, and keeps Gloo's own tcp transport); on, always; off, never.
#pragma once

#include <string>

namespace kiln {

enum class PairAuth { kAuto, kOn, kOff };

// "auto" | "on" | "off"; anything else is an error naming dist.authenticate_pairs.
PairAuth parse_pair_auth(const std::string& value);
const char* pair_auth_name(PairAuth a);

// The decision for one group: `remote` when some rank is on another host.
bool pairs_authenticate(PairAuth a, bool remote);

}  // namespace kiln
