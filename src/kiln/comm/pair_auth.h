// Whether a Gloo group's pairs authenticate their connections (the recipe's
// dist.authenticate_pairs): auto, only when the group spans hosts (one host runs in a private
// network namespace, or on loopback, and keeps Gloo's own tcp transport); on, always; off, never.
#pragma once

#include <array>

#include "kiln/base/named_values.h"

namespace kiln {

enum class PairAuth { kAuto, kOn, kOff };
inline constexpr std::array<Named<PairAuth>, 3> kPairAuthNames = {{
    {PairAuth::kAuto, "auto"},
    {PairAuth::kOn, "on"},
    {PairAuth::kOff, "off"},
}};

// The decision for one group: `remote` when some rank is on another host.
bool pairs_authenticate(PairAuth a, bool remote);

}  // namespace kiln
