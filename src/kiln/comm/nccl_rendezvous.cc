#include "kiln/comm/nccl_rendezvous.h"

#include <fmt/format.h>

#include "kiln/base/error.h"

namespace kiln {

namespace {

std::string arrived_key(int rank) { return "nccl/arrived/" + std::to_string(rank); }

}  // namespace

std::vector<int> nccl_ranks_not_arrived(Store& group_store, int world_size) {
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    try {
      if (!group_store.check({arrived_key(r)})) missing.push_back(r);
    } catch (const std::exception&) {
      missing.push_back(r);  // an unreachable store tells nothing: count it as missing
    }
  }
  return missing;
}

std::string describe_not_arrived(const std::vector<int>& missing) {
  if (missing.empty()) return "every rank arrived";
  std::string out = missing.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < missing.size(); ++i) out += (i ? ", " : "") + std::to_string(missing[i]);
  return out + " did not arrive";
}

Bytes exchange_nccl_id(Store& group_store, const std::string& group, int rank, int world_size,
                       std::chrono::milliseconds timeout, const std::function<Bytes()>& make_id) {
  group_store.set(arrived_key(rank), to_bytes("1"));
  if (rank == 0) {
    Bytes id = make_id();
    group_store.set("nccl/id", id);
    return id;
  }
  try {
    return group_store.get("nccl/id", timeout);
  } catch (const std::exception& e) {
    fail("nccl init of group {} (rank {} of {}): no unique id from rank 0 after {} ms ({}): {}",
         group, rank, world_size, timeout.count(),
         describe_not_arrived(nccl_ranks_not_arrived(group_store, world_size)), e.what());
  }
}

}  // namespace kiln
