// The agents of a multi-node job agree on what they run before any worker starts: every node
// publishes its shape (nodes, workers per node) and its run identity (for kiln train, the values
// of the recipe keys train.resume compares: run_identity.h) in node 0's store; node 0 compares
// each node with its own and publishes one verdict, which every agent reads. Nodes that differ
// would otherwise train together with a silently diverging loss (another learning rate, another
// base model), crash inside a collective (another strategy or step count), or wait out a store
// timeout (another --nproc-per-node). Store keys:
//   kiln/agent/form/node/K   node K's shape and identity (JSON)
//   kiln/agent/form/verdict  "" when every node agrees, else the one line naming the difference
//   kiln/agent/form/read     count of agents that read the verdict (node 0 keeps the store up)
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "kiln/comm/store.h"

namespace kiln {

struct NodeShape {
  int node_rank = 0;
  int nnodes = 1;
  int nproc_per_node = 1;
  std::vector<std::pair<std::string, std::string>> identity;  // (key, value), in key order
};

using RunIdentity = std::vector<std::pair<std::string, std::string>>;

// The first key whose value differs between `a` (of "<unit> <a_id>") and `b`, as one line naming
// the key, both units and both values; "" when they agree.
std::string identity_difference(const std::string& unit, int a_id, const RunIdentity& a, int b_id,
                                const RunIdentity& b);

// The first difference between node 0's shape and another node's, as one line naming the
// setting, the node and both values; "" when they agree.
std::string shape_difference(const NodeShape& node0, const NodeShape& other);

// Collective over every node's agent through `store` (node 0's). Returns "" when every node
// agrees, else the same line on every node: the first difference, or which node did not publish
// within `wait`.
std::string agree_on_formation(Store& store, const NodeShape& mine, std::chrono::milliseconds wait);

}  // namespace kiln
