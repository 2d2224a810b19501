// data.overlong: what happens to an example longer than data.seq_len, with its names listed once
// (base/named_values.h).
#pragma once

#include <array>

#include "kiln/base/named_values.h"

namespace kiln {

// truncate: keep its first seq_len tokens; drop: leave it out.
enum class Overlong { kTruncate, kDrop };
inline constexpr std::array<Named<Overlong>, 2> kOverlongNames = {{
    {Overlong::kTruncate, "truncate"},
    {Overlong::kDrop, "drop"},
}};

}  // namespace kiln
