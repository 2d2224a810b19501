#include "kiln/launch/formation.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "kiln/base/error.h"
#include "kiln/base/json.h"

namespace kiln {

namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::string node_key(int node) { return fmt::format("kiln/agent/form/node/{}", node); }
constexpr const char* kVerdict = "kiln/agent/form/verdict";
constexpr const char* kRead = "kiln/agent/form/read";

Json to_json(const NodeShape& s) {
  Json identity = Json::array();
  for (const auto& [k, v] : s.identity) identity.push_back({k, v});
  return {{"node", s.node_rank},
          {"nnodes", s.nnodes},
          {"nproc_per_node", s.nproc_per_node},
          {"identity", identity}};
}

NodeShape from_json(const Json& j) {
  NodeShape s;
  s.node_rank = j.at("node").get<int>();
  s.nnodes = j.at("nnodes").get<int>();
  s.nproc_per_node = j.at("nproc_per_node").get<int>();
  for (const Json& kv : j.at("identity")) {
    s.identity.emplace_back(kv.at(0).get<std::string>(), kv.at(1).get<std::string>());
  }
  return s;
}

}  // namespace

std::string identity_difference(const std::string& unit, int a_id, const RunIdentity& a, int b_id,
                                const RunIdentity& b) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string key = i < a.size() ? a[i].first : b[i].first;
    const std::string va = i < a.size() ? a[i].second : "(not set)";
    std::string vb = "(not set)";
    for (const auto& [k, v] : b) {
      if (k == key) vb = v;
    }
    if (va != vb) {
      return fmt::format(
          "the {}s disagree on {}: {} {} has {}, {} {} has {} (every {} must train the same "
          "recipe)",
          unit, key, unit, a_id, va, unit, b_id, vb, unit);
    }
  }
  return "";
}

std::string shape_difference(const NodeShape& a, const NodeShape& b) {
  const auto differ = [&](const std::string& what, int va, int vb) {
    return fmt::format("the nodes disagree on {}: node {} has {}, node {} has {}", what,
                       a.node_rank, va, b.node_rank, vb);
  };
  if (a.nnodes != b.nnodes) return differ("the number of nodes (--nnodes)", a.nnodes, b.nnodes);
  if (a.nproc_per_node != b.nproc_per_node) {
    return differ("the workers per node (--nproc-per-node, dist.nproc_per_node)", a.nproc_per_node,
                  b.nproc_per_node);
  }
  return identity_difference("node", a.node_rank, a.identity, b.node_rank, b.identity);
}

std::string agree_on_formation(Store& store, const NodeShape& mine, milliseconds wait) {
  store.set(node_key(mine.node_rank), to_bytes(to_json(mine).dump()));
  std::string verdict;
  if (mine.node_rank == 0) {
    const auto deadline = Clock::now() + wait;
    for (int n = 1; n < mine.nnodes && verdict.empty(); ++n) {
      const auto left = std::max(milliseconds(1),
                                 std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
      Bytes theirs;
      try {
        theirs = store.get(node_key(n), left);
      } catch (const std::exception&) {
        verdict = fmt::format(
            "node {} did not join within {:.0f} s (this node was started with --nnodes {}; is "
            "every node's agent running, with the same --master-addr and --master-port?)",
            n, std::chrono::duration<double>(wait).count(), mine.nnodes);
        break;
      }
      verdict = shape_difference(mine, from_json(parse_json(to_string(theirs), node_key(n))));
    }
    store.set(kVerdict, to_bytes(verdict));
    // Every agent that joined reads the verdict before node 0 (and its store) may go.
    int joined = 1;
    for (int n = 1; n < mine.nnodes; ++n) joined += store.check({node_key(n)}) ? 1 : 0;
    const auto until = Clock::now() + milliseconds(10000);
    while (store.add(kRead, 0) < joined - 1 && Clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(20));
    }
    return verdict;
  }
  try {
    verdict = to_string(store.get(kVerdict, wait + milliseconds(10000)));
  } catch (const std::exception& e) {
    fail("node {}: no word from node 0 on whether the nodes agree: {}", mine.node_rank, e.what());
  }
  store.add(kRead, 1);
  return verdict;
}

}  // namespace kiln
