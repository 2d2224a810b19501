// What a communicator's split() works out before it connects the new group, the same for every
// communicator (Gloo, NCCL): this rank's place in the sub-group, the members' world ranks, and
// the group's name in the store.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kiln {

// A group's identity: its name ("world", "world/intra/0"), this rank, the size, and each
// member's world rank (for messages).
struct GroupIdentity {
  std::string name;
  int rank = 0, size = 1;
  std::vector<int> world_ranks;
};

// The sub-group of `parent` made of `ranks` (ascending, containing parent.rank; KILN_CHECK
// otherwise). Named by the parent, the call's `name` and the first member; a repeated split gets
// a suffix (counted in `split_count`, the parent's) so its keys never meet the earlier group's.
GroupIdentity sub_group(const GroupIdentity& parent, const std::vector<int>& ranks,
                        const std::string& name, std::map<std::string, int>& split_count);

}  // namespace kiln
