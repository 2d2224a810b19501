// Topology discovery from a fake environment: every launcher convention, the order between them,
// flags over and against them, and every error. Table-driven; every test name starts with
// "topology/" so that `ctest -R topology` selects them.
#include "kiln/launch/topology.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "kiln/base/error.h"

namespace kiln {
namespace {

using Env = std::map<std::string, std::string>;

Topology discover(const TopologyFlags& flags, const Env& env) {
  return discover_topology(flags, [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

Topology expect(int rank, int world, int local_rank, int local_world, int node_rank, int nodes,
                std::string addr, int port, std::string source, bool agent) {
  Topology t;
  t.rank = rank;
  t.world_size = world;
  t.local_rank = local_rank;
  t.local_world_size = local_world;
  t.node_rank = node_rank;
  t.num_nodes = nodes;
  t.master_addr = std::move(addr);
  t.master_port = port;
  t.source = std::move(source);
  t.agent_spawns_workers = agent;
  return t;
}

TopologyFlags node_flags(int nnodes, int node_rank, int nproc) {
  TopologyFlags f;
  f.nnodes = nnodes;
  f.node_rank = node_rank;
  f.nproc_per_node = nproc;
  return f;
}

void expect_same(const Topology& got, const Topology& want) {
  EXPECT_EQ(got.rank, want.rank);
  EXPECT_EQ(got.world_size, want.world_size);
  EXPECT_EQ(got.local_rank, want.local_rank);
  EXPECT_EQ(got.local_world_size, want.local_world_size);
  EXPECT_EQ(got.node_rank, want.node_rank);
  EXPECT_EQ(got.num_nodes, want.num_nodes);
  EXPECT_EQ(got.master_addr, want.master_addr);
  EXPECT_EQ(got.master_port, want.master_port);
  EXPECT_EQ(got.source, want.source);
  EXPECT_EQ(got.agent_spawns_workers, want.agent_spawns_workers);
}

const Env kTorchrun = {{"RANK", "5"},
                       {"WORLD_SIZE", "8"},
                       {"LOCAL_RANK", "1"},
                       {"LOCAL_WORLD_SIZE", "4"},
                       {"GROUP_RANK", "1"},
                       {"GROUP_WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "node0"},
                       {"MASTER_PORT", "29400"}};
const Env kOmpi = {{"OMPI_COMM_WORLD_RANK", "6"},
                   {"OMPI_COMM_WORLD_SIZE", "8"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                   {"MASTER_ADDR", "h0"}};
const Env kSlurm = {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                    {"SLURM_NODEID", "1"}, {"SLURM_NNODES", "2"}, {"SLURM_NTASKS_PER_NODE", "4"},
                    {"MASTER_ADDR", "h0"}};

Env with(Env base, const Env& more) {
  for (const auto& [k, v] : more) base[k] = v;
  return base;
}

// ---- Conventions that resolve ------------------------------------------------------------------

struct Good {
  const char* name;
  Env env;
  TopologyFlags flags;
  Topology want;
};

std::vector<Good> good_cases() {
  TopologyFlags nproc4;
  nproc4.nproc_per_node = 4;
  TopologyFlags multi = node_flags(2, 1, 8);
  multi.master_addr = "10.0.0.1";
  multi.master_port = 1234;
  TopologyFlags master;
  master.master_addr = "override";
  master.master_port = 4242;
  TopologyFlags agree;
  agree.nnodes = 2;
  agree.nproc_per_node = 4;
  TopologyFlags auto_nproc;
  auto_nproc.nproc_per_node = 2;
  TopologyFlags indexed;
  indexed.nnodes = 2;
  indexed.nproc_per_node = 8;
  const Env kubeflow = {{"PET_NNODES", "2"},
                        {"PET_NPROC_PER_NODE", "4"},
                        {"PET_NODE_RANK", "1"},
                        {"PET_MASTER_ADDR", "m"},
                        {"PET_MASTER_PORT", "23456"}};
  return {
      {"default", {}, {}, expect(0, 1, 0, 1, 0, 1, "127.0.0.1", 29500, "default", true)},
      {"flags_one_node", {}, nproc4, expect(0, 4, 0, 4, 0, 1, "127.0.0.1", 29500, "flags", true)},
      {"flags_multi_node", {}, multi, expect(8, 16, 0, 8, 1, 2, "10.0.0.1", 1234, "flags", true)},
      {"flags_master_from_env",
       {{"MASTER_ADDR", "10.0.0.9"}, {"MASTER_PORT", "4000"}},
       node_flags(2, 0, 1),
       expect(0, 2, 0, 1, 0, 2, "10.0.0.9", 4000, "flags", true)},
      {"flags_node_rank_beats_launchers", with(kTorchrun, kSlurm), node_flags(1, 0, 2),
       expect(0, 2, 0, 2, 0, 1, "h0", 29400, "flags", true)},
      {"torchrun", kTorchrun, {}, expect(5, 8, 1, 4, 1, 2, "node0", 29400, "torchrun", false)},
      {"torchrun_minimal",
       {{"RANK", "1"}, {"WORLD_SIZE", "2"}},
       {},
       expect(1, 2, 1, 2, 0, 1, "127.0.0.1", 29500, "torchrun", false)},
      {"torchrun_master_flags_win", kTorchrun, master,
       expect(5, 8, 1, 4, 1, 2, "override", 4242, "torchrun", false)},
      {"torchrun_flags_that_agree", kTorchrun, agree,
       expect(5, 8, 1, 4, 1, 2, "node0", 29400, "torchrun", false)},
      {"torchrun_beats_mpi_and_slurm",
       with(with(kOmpi, kSlurm), kTorchrun),
       {},
       expect(5, 8, 1, 4, 1, 2, "node0", 29400, "torchrun", false)},
      {"kubeflow", kubeflow, {}, expect(4, 8, 0, 4, 1, 2, "m", 23456, "kubeflow", true)},
      {"kubeflow_pod_rank_is_not_torchrun",
       with(kubeflow, {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "other"}}),
       {},
       expect(4, 8, 0, 4, 1, 2, "m", 23456, "kubeflow", true)},
      {"kubeflow_node_rank_from_completion_index",
       {{"PET_NNODES", "3"},
        {"PET_NPROC_PER_NODE", "2"},
        {"JOB_COMPLETION_INDEX", "2"},
        {"PET_MASTER_ADDR", "svc"}},
       {},
       expect(4, 6, 0, 2, 2, 3, "svc", 29500, "kubeflow", true)},
      {"kubeflow_flag_overrides_auto",
       {{"PET_NNODES", "1"}, {"PET_NPROC_PER_NODE", "auto"}},
       auto_nproc,
       expect(0, 2, 0, 2, 0, 1, "127.0.0.1", 29500, "kubeflow", true)},
      {"kubeflow_nproc_auto_is_the_visible_gpus",
       {{"PET_NNODES", "1"}, {"PET_NPROC_PER_NODE", "auto"}, {"CUDA_VISIBLE_DEVICES", "0,1,3"}},
       {},
       expect(0, 3, 0, 3, 0, 1, "127.0.0.1", 29500, "kubeflow", true)},
      {"kubeflow_nproc_auto_without_gpus_is_one",
       {{"PET_NNODES", "1"}, {"PET_NPROC_PER_NODE", "auto"}, {"CUDA_VISIBLE_DEVICES", ""}},
       {},
       expect(0, 1, 0, 1, 0, 1, "127.0.0.1", 29500, "kubeflow", true)},
      {"kubeflow_fixed_elastic_nodes",
       with(kubeflow, {{"PET_NNODES", "2:2"}}),
       {},
       expect(4, 8, 0, 4, 1, 2, "m", 23456, "kubeflow", true)},
      {"openmpi", kOmpi, {}, expect(6, 8, 2, 4, 1, 2, "h0", 29500, "openmpi", false)},
      {"openmpi_beats_slurm",
       with(kSlurm, kOmpi),
       {},
       expect(6, 8, 2, 4, 1, 2, "h0", 29500, "openmpi", false)},
      {"pmi_with_locality",
       {{"PMI_RANK", "3"},
        {"PMI_SIZE", "4"},
        {"MPI_LOCALRANKID", "1"},
        {"MPI_LOCALNRANKS", "2"},
        {"MASTER_ADDR", "h0"}},
       {},
       expect(3, 4, 1, 2, 1, 2, "h0", 29500, "pmi", false)},
      {"pmi_without_locality",
       {{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MASTER_ADDR", "h0"}},
       {},
       expect(2, 3, 0, 1, 2, 3, "h0", 29500, "pmi", false)},
      {"pmi_under_srun_is_slurm",
       with(kSlurm, {{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}}),
       {},
       expect(5, 8, 1, 4, 1, 2, "h0", 29500, "slurm", false)},
      {"slurm", kSlurm, {}, expect(5, 8, 1, 4, 1, 2, "h0", 29500, "slurm", false)},
      {"slurm_master_from_nodelist",
       with(kSlurm, {{"MASTER_ADDR", ""}, {"SLURM_JOB_NODELIST", "gpu-[007-009,012],cpu1"}}),
       {},
       expect(5, 8, 1, 4, 1, 2, "gpu-007", 29500, "slurm", false)},
      {"slurm_master_from_nested_nodelist",
       with(kSlurm, {{"MASTER_ADDR", ""}, {"SLURM_JOB_NODELIST", "rack[2-3]-n[01-02]"}}),
       {},
       expect(5, 8, 1, 4, 1, 2, "rack2-n01", 29500, "slurm", false)},
      {"slurm_master_addr_beats_nodelist",
       with(kSlurm, {{"SLURM_JOB_NODELIST", "a,b"}}),
       {},
       expect(5, 8, 1, 4, 1, 2, "h0", 29500, "slurm", false)},
      {"slurm_tasks_per_node_repeat",
       {{"SLURM_PROCID", "5"},
        {"SLURM_NTASKS", "8"},
        {"SLURM_NNODES", "2"},
        {"SLURM_TASKS_PER_NODE", "4(x2)"},
        {"MASTER_ADDR", "h0"}},
       {},
       expect(5, 8, 1, 4, 1, 2, "h0", 29500, "slurm", false)},
      {"slurm_derived_per_node",
       {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "6"}, {"SLURM_NNODES", "3"}, {"MASTER_ADDR", "h0"}},
       {},
       expect(3, 6, 1, 2, 1, 3, "h0", 29500, "slurm", false)},
      {"k8s_indexed_job",
       {{"JOB_COMPLETION_INDEX", "2"},
        {"KILN_NNODES", "4"},
        {"KILN_NPROC_PER_NODE", "2"},
        {"KILN_MASTER_ADDR", "job-0.svc"},
        {"KILN_MASTER_PORT", "3000"}},
       {},
       expect(4, 8, 0, 2, 2, 4, "job-0.svc", 3000, "k8s-indexed-job", true)},
      {"k8s_indexed_job_with_flags",
       {{"JOB_COMPLETION_INDEX", "1"}, {"KILN_NNODES", "9"}, {"MASTER_ADDR", "m"}},
       indexed,
       expect(8, 16, 0, 8, 1, 2, "m", 29500, "k8s-indexed-job", true)},
      {"whitespace_and_empty_variables",
       with(kOmpi, {{"RANK", ""}, {"OMPI_COMM_WORLD_RANK", " 6\n"}}),
       {},
       expect(6, 8, 2, 4, 1, 2, "h0", 29500, "openmpi", false)},
  };
}

void PrintTo(const Good& g, std::ostream* os) { *os << g.name; }

class TopologyResolves : public ::testing::TestWithParam<Good> {};

TEST_P(TopologyResolves, ToTheExpectedLayout) {
  expect_same(discover(GetParam().flags, GetParam().env), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(topology, TopologyResolves, ::testing::ValuesIn(good_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- Errors ------------------------------------------------------------------------------------

struct Bad {
  const char* name;
  Env env;
  TopologyFlags flags;
  const char* error;
};

std::vector<Bad> bad_cases() {
  TopologyFlags negative;
  negative.nproc_per_node = -2;
  TopologyFlags two_nodes;
  two_nodes.nnodes = 2;
  TopologyFlags four_nodes;
  four_nodes.nnodes = 4;
  TopologyFlags nproc8;
  nproc8.nproc_per_node = 8;
  TopologyFlags port0;
  port0.master_port = 0;
  return {
      {"not_an_integer",
       {{"RANK", "abc"}, {"WORLD_SIZE", "2"}},
       {},
       "topology (torchrun): RANK='abc' is not an integer"},
      {"trailing_garbage",
       {{"RANK", "0"}, {"WORLD_SIZE", "4x"}},
       {},
       "WORLD_SIZE='4x' is not an integer"},
      {"out_of_range",
       {{"RANK", "99999999999"}, {"WORLD_SIZE", "2"}},
       {},
       "RANK='99999999999' is out of range"},
      {"negative_variable",
       with(kTorchrun, {{"LOCAL_RANK", "-1"}}),
       {},
       "LOCAL_RANK=-1 is negative"},
      {"negative_flag", {}, negative, "topology (flags): --nproc-per-node=-2 is negative"},
      {"zero_world", {{"RANK", "0"}, {"WORLD_SIZE", "0"}}, {}, "WORLD_SIZE=0 must be at least 1"},
      {"rank_not_below_world",
       with(kTorchrun, {{"RANK", "8"}}),
       {},
       "topology (torchrun): RANK=8 must be less than WORLD_SIZE=8"},
      {"local_rank_not_below_local_size",
       with(kOmpi, {{"OMPI_COMM_WORLD_LOCAL_RANK", "4"}}),
       {},
       "OMPI_COMM_WORLD_LOCAL_RANK=4 must be less than OMPI_COMM_WORLD_LOCAL_SIZE=4"},
      {"node_rank_not_below_nodes",
       {},
       node_flags(2, 2, 1),
       "--node-rank=2 must be less than --nnodes=2"},
      {"completion_index_not_below_nodes",
       {{"JOB_COMPLETION_INDEX", "4"}, {"KILN_NNODES", "4"}, {"MASTER_ADDR", "m"}},
       {},
       "JOB_COMPLETION_INDEX=4 must be less than KILN_NNODES=4"},
      {"slurm_world_mismatch",
       with(kSlurm, {{"SLURM_NTASKS", "6"}, {"SLURM_PROCID", "1"}}),
       {},
       "SLURM_NTASKS=6 is not SLURM_NNODES=2 x SLURM_NTASKS_PER_NODE=4"},
      {"torchrun_world_mismatch",
       with(kTorchrun, {{"GROUP_WORLD_SIZE", "3"}}),
       {},
       "WORLD_SIZE=8 is not GROUP_WORLD_SIZE=3 x LOCAL_WORLD_SIZE=4"},
      {"openmpi_uneven_nodes",
       with(kOmpi, {{"OMPI_COMM_WORLD_SIZE", "10"}}),
       {},
       "OMPI_COMM_WORLD_SIZE=10 is not a multiple of OMPI_COMM_WORLD_LOCAL_SIZE=4"},
      {"slurm_uneven_nodes",
       {{"SLURM_PROCID", "0"},
        {"SLURM_NTASKS", "7"},
        {"SLURM_NNODES", "4"},
        {"SLURM_TASKS_PER_NODE", "2(x3),1"}},
       {},
       "SLURM_TASKS_PER_NODE='2(x3),1' gives nodes different task counts"},
      {"openmpi_needs_master",
       with(kOmpi, {{"MASTER_ADDR", ""}}),
       {},
       "topology (openmpi): 2 nodes need a master address: set MASTER_ADDR or pass --master-addr"},
      {"flags_need_master", {}, node_flags(2, 0, 1), "topology (flags): 2 nodes need a master"},
      {"kubeflow_needs_master",
       {{"PET_NNODES", "2"}, {"PET_NODE_RANK", "0"}},
       {},
       "topology (kubeflow): 2 nodes need a master address"},
      {"pmi_needs_master",
       {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}},
       {},
       "topology (pmi): 2 nodes need a master address"},
      {"nnodes_without_node_rank", {}, two_nodes, "--nnodes=2 needs --node-rank"},
      {"indexed_job_without_node_count",
       {{"JOB_COMPLETION_INDEX", "1"}},
       {},
       "JOB_COMPLETION_INDEX is set but the node count is not: pass --nnodes or set KILN_NNODES"},
      {"worker_flag_disagrees", kOmpi, nproc8,
       "--nproc-per-node=8 disagrees with OMPI_COMM_WORLD_LOCAL_SIZE=4"},
      {"worker_nnodes_disagrees", kSlurm, four_nodes, "--nnodes=4 disagrees with SLURM_NNODES=2"},
      {"port_out_of_range",
       with(kTorchrun, {{"MASTER_PORT", "70000"}}),
       {},
       "MASTER_PORT=70000 is not a valid port"},
      {"port_flag_zero", {}, port0, "--master-port=0 is not a valid port"},
      {"openmpi_missing_size",
       {{"OMPI_COMM_WORLD_RANK", "0"}},
       {},
       "topology (openmpi): OMPI_COMM_WORLD_SIZE is not set"},
      {"torchrun_missing_world", {{"RANK", "0"}}, {}, "topology (torchrun): WORLD_SIZE is not set"},
      {"kubeflow_nproc_bad",
       {{"PET_NNODES", "1"}, {"PET_NPROC_PER_NODE", "gpu"}},
       {},
       "PET_NPROC_PER_NODE='gpu' is not an integer"},
      {"kubeflow_elastic_range",
       {{"PET_NNODES", "1:4"}, {"PET_NPROC_PER_NODE", "1"}},
       {},
       "PET_NNODES='1:4': elastic node counts are not supported"},
      {"kubeflow_bad_range",
       {{"PET_NNODES", "2:x"}, {"PET_NPROC_PER_NODE", "1"}},
       {},
       "PET_NNODES='2:x' is not N or MIN:MAX"},
      {"kubeflow_missing_node_rank",
       {{"PET_NNODES", "2"}, {"PET_MASTER_ADDR", "m"}},
       {},
       "topology (kubeflow): PET_NODE_RANK is not set"},
      {"kubeflow_missing_nnodes", {{"PET_NODE_RANK", "0"}}, {}, "PET_NNODES is not set"},
      {"pmi_half_locality",
       {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"}},
       {},
       "topology (pmi): MPI_LOCALNRANKS is not set"},
      {"slurm_missing_ntasks",
       {{"SLURM_PROCID", "0"}, {"SLURM_NNODES", "1"}},
       {},
       "topology (slurm): SLURM_NTASKS is not set"},
  };
}

void PrintTo(const Bad& b, std::ostream* os) { *os << b.name; }

class TopologyRejects : public ::testing::TestWithParam<Bad> {};

TEST_P(TopologyRejects, WithAnErrorNamingTheCulprits) {
  std::string msg = "(no error)";
  try {
    discover(GetParam().flags, GetParam().env);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(GetParam().error), std::string::npos) << "error was: " << msg;
}

INSTANTIATE_TEST_SUITE_P(topology, TopologyRejects, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- The agent's workers -----------------------------------------------------------------------

class AgentWorkers : public ::testing::TestWithParam<Good> {};

TEST_P(AgentWorkers, EachGetsItsOwnRankOnTheNode) {
  const Topology node = discover(GetParam().flags, GetParam().env);
  ASSERT_TRUE(node.agent_spawns_workers);
  EXPECT_NE(describe_topology(node).find("node agent"), std::string::npos);
  for (int l = 0; l < node.local_world_size; ++l) {
    const Topology w = worker_topology(node, l);
    EXPECT_FALSE(w.agent_spawns_workers);
    EXPECT_EQ(w.rank, node.node_rank * node.local_world_size + l);
    EXPECT_EQ(w.local_rank, l);
    EXPECT_EQ(w.world_size, node.world_size);
    EXPECT_EQ(w.master_addr, node.master_addr);
    EXPECT_EQ(describe_topology(w).find("rank " + std::to_string(w.rank) + "/"), 0u);
  }
  EXPECT_THROW(worker_topology(node, node.local_world_size), Error);
  EXPECT_THROW(worker_topology(worker_topology(node, 0), 0), Error);
}

std::vector<Good> agent_cases() {
  std::vector<Good> out;
  for (const Good& g : good_cases()) {
    if (g.want.agent_spawns_workers) out.push_back(g);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(topology, AgentWorkers, ::testing::ValuesIn(agent_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kiln
