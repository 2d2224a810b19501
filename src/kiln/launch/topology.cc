#include "kiln/launch/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "kiln/base/error.h"
#include "kiln/base/file.h"

namespace kiln {
namespace {

// A number and where it came from, so an error can name the variable or flag: "RANK=4".
struct Named {
  int value = 0;
  std::string name;      // "RANK", "--nnodes", or how a derived value was computed
  bool derived = false;  // computed from other values rather than read
  std::string show() const {
    return derived ? fmt::format("{} (from {})", value, name) : fmt::format("{}={}", name, value);
  }
};

Named derive(int64_t value, std::string how) {
  return Named{static_cast<int>(value), std::move(how), true};
}

class Resolver {
 public:
  Resolver(const TopologyFlags& flags, const std::function<const char*(const char*)>& getenv)
      : flags_(flags), getenv_(getenv) {}

  const TopologyFlags& flags() const { return flags_; }
  void set_convention(const char* c) { conv_ = c; }
  const char* convention() const { return conv_; }

  template <typename... A>
  [[noreturn]] void error(fmt::format_string<A...> f, A&&... a) const {
    fail("topology ({}): {}", conv_, fmt::format(f, std::forward<A>(a)...));
  }

  // Unset and empty variables are alike: shells and manifests write empty ones for "none".
  std::optional<std::string> str(const char* name) const {
    const char* v = getenv_(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  }
  bool has(const char* name) const { return str(name).has_value(); }
  // Set, even if empty (CUDA_VISIBLE_DEVICES="" means no GPU, not "unset").
  std::optional<std::string> raw(const char* name) const {
    const char* v = getenv_(name);
    return v == nullptr ? std::nullopt : std::optional<std::string>(v);
  }

  std::optional<Named> num(const char* name) const {
    const auto s = str(name);
    if (!s) return std::nullopt;
    size_t b = s->find_first_not_of(" \t\r\n");
    size_t e = s->find_last_not_of(" \t\r\n");
    const std::string t = b == std::string::npos ? "" : s->substr(b, e - b + 1);
    int v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec == std::errc::result_out_of_range) error("{}='{}' is out of range", name, *s);
    if (ec != std::errc() || end != t.data() + t.size() || t.empty()) {
      error("{}='{}' is not an integer", name, *s);
    }
    return checked(Named{v, name});
  }
  Named need(const char* name) const {
    auto v = num(name);
    if (!v) error("{} is not set", name);
    return *v;
  }
  std::optional<Named> flag(const std::optional<int>& v, const char* name) const {
    if (!v) return std::nullopt;
    return checked(Named{*v, name});
  }
  // The first of `names` that is set; the others are not read (nor need to be integers).
  std::optional<Named> any_of(std::initializer_list<const char*> names) const {
    for (const char* n : names) {
      if (has(n)) return num(n);
    }
    return std::nullopt;
  }
  // A flag overrides the variables it stands for.
  std::optional<Named> flag_or(const std::optional<int>& v, const char* flag_name,
                               std::initializer_list<const char*> names) const {
    if (v) return flag(v, flag_name);
    return any_of(names);
  }

  void at_least_one(const Named& n) const {
    if (n.value < 1) error("{} must be at least 1", n.show());
  }
  void below(const Named& v, const Named& bound) const {
    if (v.value >= bound.value) error("{} must be less than {}", v.show(), bound.show());
  }
  // `whole` / `part`, which must divide evenly: kiln runs the same number of workers per node.
  Named quotient(const Named& whole, const Named& part) const {
    at_least_one(part);
    if (whole.value % part.value != 0) {
      error("{} is not a multiple of {}: nodes with different worker counts are not supported",
            whole.show(), part.show());
    }
    return derive(whole.value / part.value, whole.name + " / " + part.name);
  }
  // A worker launcher already fixed the layout: a flag may only repeat it.
  void agree(const std::optional<int>& flag, const char* flag_name, const Named& v) const {
    if (flag && *flag != v.value) {
      error("--{}={} disagrees with {}: the launcher has already started the workers", flag_name,
            *flag, v.show());
    }
  }

 private:
  Named checked(Named n) const {
    if (n.value < 0) error("{} is negative", n.show());
    return n;
  }
  const TopologyFlags& flags_;
  const std::function<const char*(const char*)>& getenv_;
  const char* conv_ = "default";
};

struct Draft {
  bool agent = true;
  Named rank, world, local_rank, local_world, node_rank, nodes;
  std::optional<std::string> master_addr;
  std::optional<Named> master_port;
};

// Node-agent conventions: the agent spawns `nproc` workers on each of `nodes` nodes.
Draft agent(const Resolver& r, Named nodes, Named node_rank, Named nproc) {
  r.at_least_one(nodes);
  r.at_least_one(nproc);
  const int64_t world = int64_t{nodes.value} * nproc.value;
  if (world > INT32_MAX) r.error("{} x {} workers is too many", nodes.show(), nproc.show());
  Draft d;
  d.nodes = nodes;
  d.node_rank = node_rank;
  d.local_world = nproc;
  d.world = derive(world, nodes.name + " x " + nproc.name);
  d.rank = derive(int64_t{node_rank.value} * nproc.value, node_rank.name + " x " + nproc.name);
  d.local_rank = derive(0, "the node agent");
  return d;
}

Draft from_flags(const Resolver& r) {
  const TopologyFlags& f = r.flags();
  const Named nodes = r.flag(f.nnodes, "--nnodes").value_or(derive(1, "default"));
  auto node_rank = r.flag(f.node_rank, "--node-rank");
  if (!node_rank && nodes.value > 1) r.error("{} needs --node-rank", nodes.show());
  Draft d = agent(r, nodes, node_rank.value_or(derive(0, "default")),
                  r.flag(f.nproc_per_node, "--nproc-per-node").value_or(derive(1, "default")));
  d.master_addr = r.str("MASTER_ADDR");
  d.master_port = r.num("MASTER_PORT");
  return d;
}

Draft from_torchrun(const Resolver& r) {
  Draft d;
  d.agent = false;
  d.rank = r.need("RANK");
  d.world = r.need("WORLD_SIZE");
  r.at_least_one(d.world);
  const auto groups = r.num("GROUP_WORLD_SIZE");
  if (auto lws = r.num("LOCAL_WORLD_SIZE")) {
    d.local_world = *lws;
  } else {
    d.local_world = groups ? r.quotient(d.world, *groups) : derive(d.world.value, "WORLD_SIZE");
  }
  d.nodes = groups ? *groups : r.quotient(d.world, d.local_world);
  d.local_rank = r.num("LOCAL_RANK")
                     .value_or(derive(d.rank.value % std::max(d.local_world.value, 1),
                                      "RANK % LOCAL_WORLD_SIZE"));
  d.node_rank = r.num("GROUP_RANK")
                    .value_or(derive(d.rank.value / std::max(d.local_world.value, 1),
                                     "RANK / LOCAL_WORLD_SIZE"));
  d.master_addr = r.str("MASTER_ADDR");
  d.master_port = r.num("MASTER_PORT");
  return d;
}

// GPUs this process may use: CUDA_VISIBLE_DEVICES's entries when it is set, else /dev/nvidiaN.
int visible_gpus(const Resolver& r) {
  if (const auto v = r.raw("CUDA_VISIBLE_DEVICES")) {
    int n = 0;
    for (size_t b = 0; b <= v->size();) {
      size_t e = v->find(',', b);
      if (e == std::string::npos) e = v->size();
      if (e > b) ++n;
      b = e + 1;
    }
    return n;
  }
  int n = 0;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator("/dev", ec)) {
    const std::string name = d.path().filename().string();
    if (name.size() > 6 && name.starts_with("nvidia") &&
        name.find_first_not_of("0123456789", 6) == std::string::npos) {
      ++n;
    }
  }
  return n;
}

// PET_NPROC_PER_NODE: a count, or "auto" (as torchrun's --nproc-per-node auto): the visible GPUs,
// else 1.
std::optional<Named> kubeflow_nproc(const Resolver& r) {
  if (r.str("PET_NPROC_PER_NODE") != "auto") return r.any_of({"PET_NPROC_PER_NODE"});
  const int gpus = visible_gpus(r);
  return derive(std::max(gpus, 1), gpus > 0 ? "PET_NPROC_PER_NODE=auto: the visible GPUs"
                                            : "PET_NPROC_PER_NODE=auto: no GPU");
}

// PET_NNODES: N, or torchrun's elastic MIN:MAX, accepted when it is fixed (N:N).
std::optional<Named> kubeflow_nodes(const Resolver& r) {
  const auto s = r.str("PET_NNODES");
  if (!s || s->find(':') == std::string::npos) return r.any_of({"PET_NNODES"});
  const std::string lo = s->substr(0, s->find(':')), hi = s->substr(s->find(':') + 1);
  int a = 0, b = 0;
  const auto pa = std::from_chars(lo.data(), lo.data() + lo.size(), a);
  const auto pb = std::from_chars(hi.data(), hi.data() + hi.size(), b);
  if (pa.ec != std::errc() || pa.ptr != lo.data() + lo.size() || pb.ec != std::errc() ||
      pb.ptr != hi.data() + hi.size() || lo.empty() || hi.empty()) {
    r.error("PET_NNODES='{}' is not N or MIN:MAX", *s);
  }
  if (a != b) {
    r.error(
        "PET_NNODES='{}': elastic node counts are not supported; kiln runs a fixed number "
        "of nodes (N or N:N)",
        *s);
  }
  return derive(a, fmt::format("PET_NNODES='{}'", *s));
}

Draft from_kubeflow(const Resolver& r) {
  const TopologyFlags& f = r.flags();
  const auto nodes = f.nnodes ? r.flag(f.nnodes, "--nnodes") : kubeflow_nodes(r);
  if (!nodes) r.error("PET_NNODES is not set");
  auto node_rank = r.any_of({"PET_NODE_RANK", "JOB_COMPLETION_INDEX"});
  if (!node_rank && nodes->value > 1) r.error("PET_NODE_RANK is not set");
  const auto nproc =
      f.nproc_per_node ? r.flag(f.nproc_per_node, "--nproc-per-node") : kubeflow_nproc(r);
  Draft d = agent(r, *nodes, node_rank.value_or(derive(0, "default")),
                  nproc.value_or(derive(1, "default")));
  d.master_addr = r.str("PET_MASTER_ADDR");
  if (!d.master_addr) d.master_addr = r.str("MASTER_ADDR");
  d.master_port = r.any_of({"PET_MASTER_PORT", "MASTER_PORT"});
  return d;
}

// MPI-style worker conventions: ranks and local ranks given, nodes derived from the local size.
Draft mpi_like(const Resolver& r, Named rank, Named world, Named local_rank, Named local_world) {
  Draft d;
  d.agent = false;
  d.rank = rank;
  d.world = world;
  d.local_rank = local_rank;
  d.local_world = local_world;
  d.nodes = r.quotient(world, local_world);
  d.node_rank = derive(rank.value / local_world.value, rank.name + " / " + local_world.name);
  d.master_addr = r.str("MASTER_ADDR");
  d.master_port = r.num("MASTER_PORT");
  return d;
}

// Reads in the order named, so a missing variable is reported the same way on every compiler.
Draft from_openmpi(const Resolver& r) {
  const Named rank = r.need("OMPI_COMM_WORLD_RANK");
  const Named world = r.need("OMPI_COMM_WORLD_SIZE");
  const Named local_rank = r.need("OMPI_COMM_WORLD_LOCAL_RANK");
  return mpi_like(r, rank, world, local_rank, r.need("OMPI_COMM_WORLD_LOCAL_SIZE"));
}

Draft from_pmi(const Resolver& r) {
  const Named rank = r.need("PMI_RANK");
  const Named world = r.need("PMI_SIZE");
  if (r.has("MPI_LOCALRANKID") || r.has("MPI_LOCALNRANKS")) {
    const Named local_rank = r.need("MPI_LOCALRANKID");
    return mpi_like(r, rank, world, local_rank, r.need("MPI_LOCALNRANKS"));
  }
  // Without locality every rank is taken to be alone on its node: never two on one device.
  return mpi_like(r, rank, world, derive(0, "no MPI_LOCALRANKID"), derive(1, "no MPI_LOCALNRANKS"));
}

// The first host of a Slurm hostlist: "gpu-[007-009,012],cpu1" -> "gpu-007",
// "rack[2-3]-n[01-02]" -> "rack2-n01" (each bracket's first number, zero padding kept).
std::string first_slurm_host(std::string_view list) {
  std::string host;
  for (size_t i = 0; i < list.size() && list[i] != ',';) {
    if (list[i] != '[') {
      host += list[i++];
      continue;
    }
    const size_t close = list.find(']', i);
    const std::string_view inside =
        list.substr(i + 1, (close == std::string_view::npos ? list.size() : close) - i - 1);
    host += inside.substr(0, inside.find_first_of(",-"));
    i = close == std::string_view::npos ? list.size() : close + 1;
  }
  return host;
}

Draft from_slurm(const Resolver& r) {
  Draft d;
  d.agent = false;
  d.rank = r.need("SLURM_PROCID");
  const auto world = r.any_of({"SLURM_NTASKS", "SLURM_NPROCS"});
  const auto nodes = r.any_of({"SLURM_NNODES", "SLURM_JOB_NUM_NODES"});
  if (!world) r.error("SLURM_NTASKS is not set");
  if (!nodes) r.error("SLURM_NNODES is not set");
  d.world = *world;
  d.nodes = *nodes;
  r.at_least_one(d.world);
  r.at_least_one(d.nodes);
  if (auto per = r.num("SLURM_NTASKS_PER_NODE")) {
    d.local_world = *per;
  } else if (auto tpn = r.str("SLURM_TASKS_PER_NODE")) {
    // "4" or "4(x2)": every node the same; "4,2" or "4(x2),3": uneven, unsupported.
    const std::string head = tpn->substr(0, tpn->find('('));
    const size_t close = tpn->find(')');
    if (tpn->find(',') != std::string::npos ||
        (close != std::string::npos && close + 1 != tpn->size())) {
      r.error(
          "SLURM_TASKS_PER_NODE='{}' gives nodes different task counts, which kiln does "
          "not support",
          *tpn);
    }
    int v = 0;
    const auto [end, ec] = std::from_chars(head.data(), head.data() + head.size(), v);
    if (ec != std::errc() || end != head.data() + head.size() || head.empty()) {
      r.error("SLURM_TASKS_PER_NODE='{}' is not an integer", *tpn);
    }
    d.local_world = Named{v, "SLURM_TASKS_PER_NODE"};
  } else {
    d.local_world = r.quotient(d.world, d.nodes);
  }
  r.at_least_one(d.local_world);
  d.local_rank =
      r.num("SLURM_LOCALID")
          .value_or(derive(d.rank.value % d.local_world.value, "SLURM_PROCID % tasks per node"));
  d.node_rank =
      r.num("SLURM_NODEID")
          .value_or(derive(d.rank.value / d.local_world.value, "SLURM_PROCID / tasks per node"));
  d.master_addr = r.str("MASTER_ADDR");
  // Several nodes and no MASTER_ADDR: the job's first node (where SLURM_PROCID 0 runs).
  if (!d.master_addr && d.nodes.value > 1) {
    if (const auto list = r.str("SLURM_JOB_NODELIST")) {
      if (std::string host = first_slurm_host(*list); !host.empty()) d.master_addr = host;
    }
  }
  d.master_port = r.num("MASTER_PORT");
  return d;
}

Draft from_indexed_job(const Resolver& r) {
  const TopologyFlags& f = r.flags();
  const auto nodes = r.flag_or(f.nnodes, "--nnodes", {"KILN_NNODES"});
  if (!nodes)
    r.error(
        "JOB_COMPLETION_INDEX is set but the node count is not: pass --nnodes or "
        "set KILN_NNODES");
  const auto nproc = r.flag_or(f.nproc_per_node, "--nproc-per-node", {"KILN_NPROC_PER_NODE"});
  Draft d = agent(r, *nodes, r.need("JOB_COMPLETION_INDEX"), nproc.value_or(derive(1, "default")));
  d.master_addr = r.str("MASTER_ADDR");
  if (!d.master_addr) d.master_addr = r.str("KILN_MASTER_ADDR");
  d.master_port = r.any_of({"MASTER_PORT", "KILN_MASTER_PORT"});
  return d;
}

}  // namespace

Topology discover_topology(const TopologyFlags& flags,
                           const std::function<const char*(const char*)>& getenv) {
  Resolver r(flags, getenv);
  const bool any_flag = flags.nnodes || flags.node_rank || flags.nproc_per_node ||
                        flags.master_addr || flags.master_port;
  Draft d;
  if (flags.node_rank) {
    r.set_convention("flags");
    d = from_flags(r);
  } else if (r.has("RANK") && (r.has("LOCAL_RANK") || !r.has("PET_NNODES"))) {
    r.set_convention("torchrun");
    d = from_torchrun(r);
  } else if (r.has("PET_NNODES") || r.has("PET_NODE_RANK")) {
    r.set_convention("kubeflow");
    d = from_kubeflow(r);
  } else if (r.has("OMPI_COMM_WORLD_RANK")) {
    r.set_convention("openmpi");
    d = from_openmpi(r);
  } else if (r.has("PMI_RANK") && !(r.has("SLURM_PROCID") && !r.has("MPI_LOCALRANKID"))) {
    // srun's PMI plugins set PMI_RANK without locality; Slurm's own variables say more.
    r.set_convention("pmi");
    d = from_pmi(r);
  } else if (r.has("SLURM_PROCID")) {
    r.set_convention("slurm");
    d = from_slurm(r);
  } else if (r.has("JOB_COMPLETION_INDEX")) {
    r.set_convention("k8s-indexed-job");
    d = from_indexed_job(r);
  } else {
    r.set_convention(any_flag ? "flags" : "default");
    d = from_flags(r);
  }
  if (!d.agent) {
    r.agree(flags.nnodes, "nnodes", d.nodes);
    r.agree(flags.nproc_per_node, "nproc-per-node", d.local_world);
  }

  r.at_least_one(d.world);
  r.at_least_one(d.local_world);
  r.at_least_one(d.nodes);
  r.below(d.node_rank, d.nodes);
  r.below(d.local_rank, d.local_world);
  r.below(d.rank, d.world);
  if (int64_t{d.nodes.value} * d.local_world.value != d.world.value) {
    r.error("{} is not {} x {}", d.world.show(), d.nodes.show(), d.local_world.show());
  }
  if (flags.master_addr) d.master_addr = *flags.master_addr;
  if (auto p = r.flag(flags.master_port, "--master-port")) d.master_port = p;
  if (!d.master_addr && d.nodes.value > 1) {
    r.error("{} nodes need a master address: set MASTER_ADDR or pass --master-addr", d.nodes.value);
  }
  if (d.master_port && (d.master_port->value < 1 || d.master_port->value > 65535)) {
    r.error("{} is not a valid port", d.master_port->show());
  }

  Topology t;
  t.rank = d.rank.value;
  t.world_size = d.world.value;
  t.local_rank = d.local_rank.value;
  t.local_world_size = d.local_world.value;
  t.node_rank = d.node_rank.value;
  t.num_nodes = d.nodes.value;
  t.master_addr = d.master_addr.value_or("127.0.0.1");
  t.master_port = d.master_port ? d.master_port->value : kDefaultMasterPort;
  t.source = r.convention();
  t.agent_spawns_workers = d.agent;
  return t;
}

Topology worker_topology(const Topology& node, int local_rank) {
  KILN_CHECK(node.agent_spawns_workers, "worker_topology of a worker ({})", node.source);
  KILN_CHECK(local_rank >= 0 && local_rank < node.local_world_size, "local rank {} of {}",
             local_rank, node.local_world_size);
  Topology t = node;
  t.rank = node.node_rank * node.local_world_size + local_rank;
  t.local_rank = local_rank;
  t.agent_spawns_workers = false;
  return t;
}

std::string describe_topology(const Topology& t) {
  const std::string where =
      fmt::format("master {}:{}, from {}", t.master_addr, t.master_port, t.source);
  if (t.agent_spawns_workers) {
    return fmt::format("node agent {}/{} for ranks {}..{} of {}, {}", t.node_rank, t.num_nodes,
                       t.rank, t.rank + t.local_world_size - 1, t.world_size, where);
  }
  return fmt::format("rank {}/{} (node {}/{}, local {}/{}), {}", t.rank, t.world_size, t.node_rank,
                     t.num_nodes, t.local_rank, t.local_world_size, where);
}

}  // namespace kiln
