#include "kiln/comm/sub_group.h"

#include <fmt/format.h>

#include "kiln/base/error.h"

namespace kiln {

GroupIdentity sub_group(const GroupIdentity& parent, const std::vector<int>& ranks,
                        const std::string& name, std::map<std::string, int>& split_count) {
  KILN_CHECK(!ranks.empty() && !name.empty());
  GroupIdentity sub;
  sub.size = static_cast<int>(ranks.size());
  sub.rank = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    KILN_CHECK(ranks[i] >= 0 && ranks[i] < parent.size && (i == 0 || ranks[i] > ranks[i - 1]),
               "split({}): ranks must be ascending members of group {}, rank {} of {}", name,
               parent.name, parent.rank, parent.size);
    if (ranks[i] == parent.rank) sub.rank = static_cast<int>(i);
    sub.world_ranks.push_back(parent.world_ranks[ranks[i]]);
  }
  KILN_CHECK(sub.rank >= 0, "split({}): rank {} is not in the ranks given", name, parent.rank);
  sub.name = fmt::format("{}/{}/{}", parent.name, name, ranks[0]);
  const int repeat = split_count[sub.name]++;
  if (repeat > 0) sub.name += fmt::format(".{}", repeat);
  return sub;
}

}  // namespace kiln
