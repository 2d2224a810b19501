// kiln train RECIPE.yaml [key=value ...]
//
// One command for every way of running: a single process; N local workers
// (dist.nproc_per_node=N: this process becomes the node agent and spawns them); several nodes
// with kiln as the agent on each (--nnodes/--node-rank/--master-addr/--master-port, or the
// Kubeflow PET_* / indexed-Job environment); or ranks started by an external launcher
// (torchrun, mpirun, srun), each of which joins the group directly.
#include <algorithm>
#include <cstdlib>
#include <thread>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/cli/commands.h"
#include "kiln/dist/topology.h"
#include "kiln/launch/agent.h"
#include "kiln/launch/worker.h"
#include "kiln/train/trainer.h"

namespace kiln::cli {

namespace {

struct TrainOpts {
  std::string recipe;
  std::vector<std::string> overrides;
  std::optional<int> nnodes, node_rank, nproc_per_node, master_port;
  std::optional<std::string> master_addr;
};

int train_here(const Recipe& r, WorkerContext* ctx) {
  TrainResult res = ctx ? train(r, *ctx) : train(r);
  if (!ctx || ctx->rank == 0) {
    std::fprintf(stderr, "trained %lld steps: loss %.4f -> %.4f; model in %s\n",
                 static_cast<long long>(res.steps), res.first_loss, res.last_loss,
                 res.model_dir.c_str());
  }
  return 0;
}

// A job-wide secret all ranks of an externally launched job share.
std::string external_token() {
  for (const char* v : {"KILN_STORE_TOKEN", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",
                        "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE", "KILN_JOB_ID"}) {
    if (const char* t = std::getenv(v)) return std::string(v) + ":" + t;
  }
  KILN_LOG_WARN("no job id in the environment (KILN_STORE_TOKEN, SLURM_JOB_ID, ...): the store "
                "uses a fixed token");
  return "kiln-default-token";
}

int run(const TrainOpts& o) {
  const Recipe r = load_recipe(o.recipe, o.overrides);
  std::vector<std::string> worker_args = {"train", o.recipe};
  worker_args.insert(worker_args.end(), o.overrides.begin(), o.overrides.end());

  TopologyFlags flags;
  flags.nnodes = o.nnodes;
  flags.node_rank = o.node_rank;
  flags.nproc_per_node = o.nproc_per_node;
  flags.master_addr = o.master_addr;
  flags.master_port = o.master_port;
  const char* spawned = std::getenv("KILN_WORKER");
  const Topology t = discover_topology(flags);
  if (spawned != nullptr || !t.agent_spawns_workers) {
    if (t.world_size == 1 && spawned == nullptr) return train_here(r, nullptr);
    // A worker: ours (KILN_WORKER) or an external launcher's rank.
    WorkerSpec w;
    w.rank = t.rank;
    w.world_size = t.world_size;
    w.local_rank = t.local_rank;
    w.local_world_size = t.local_world_size;
    w.node_rank = t.node_rank;
    w.nnodes = t.num_nodes;
    w.master_addr = t.master_addr;
    w.timeout_s = r.dist.timeout_s;
    if (spawned != nullptr) {
      w.store_port = std::atoi(std::getenv("KILN_STORE_PORT"));
      w.token = std::getenv("KILN_STORE_TOKEN") ? std::getenv("KILN_STORE_TOKEN") : "";
    } else {
      // External launcher: rank 0 serves the store. Under torchrun MASTER_PORT is torch's own
      // store, so kiln's listens one port above unless KILN_STORE_PORT says otherwise.
      const char* sp = std::getenv("KILN_STORE_PORT");
      w.store_port = sp ? std::atoi(sp)
                        : t.master_port + (std::getenv("TORCHELASTIC_RUN_ID") ? 1 : 0);
      w.host_store = true;
      w.token = external_token();
      w.threads = r.dist.threads_per_worker > 0
                      ? r.dist.threads_per_worker
                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                        t.local_world_size);
    }
    return run_worker(w, [&](WorkerContext& ctx) { return train_here(r, &ctx); });
  }
  // This process is the node agent.
  const int nproc = o.nproc_per_node.value_or(t.local_world_size > 1 ? t.local_world_size
                                                                      : r.dist.nproc_per_node);
  if (nproc == 1 && t.num_nodes == 1) return train_here(r, nullptr);
  AgentSpec a;
  a.nproc_per_node = nproc;
  a.nnodes = t.num_nodes;
  a.node_rank = t.node_rank;
  a.master_addr = t.master_addr;
  a.master_port = t.num_nodes > 1 || o.master_port ? t.master_port : 0;  // 0: any free port
  a.threads_per_worker = r.dist.threads_per_worker;
  a.worker_args = worker_args;
  if (t.num_nodes > 1) {
    a.token = std::getenv("KILN_STORE_TOKEN") ? std::getenv("KILN_STORE_TOKEN") : external_token();
  } else {
    a.token = random_token();
  }
  return run_agent(a);
}

}  // namespace

Command add_train(CLI::App& app) {
  auto o = std::make_shared<TrainOpts>();
  CLI::App* sub = app.add_subcommand(
      "train", "Train a model from a YAML recipe; key=value arguments override recipe keys");
  sub->add_option("recipe", o->recipe, "Recipe YAML (keys: docs/recipe.md)")->required();
  sub->add_option("overrides", o->overrides, "Overrides such as optimizer.lr=1e-4");
  sub->add_option("--nnodes", o->nnodes, "Number of nodes (kiln runs as the agent on each)");
  sub->add_option("--node-rank", o->node_rank, "This node's rank");
  sub->add_option("--nproc-per-node", o->nproc_per_node,
                  "Workers on this node (default: dist.nproc_per_node)");
  sub->add_option("--master-addr", o->master_addr, "Address of node 0 (hosts the store)");
  sub->add_option("--master-port", o->master_port, "Port of the store on node 0");
  sub->footer(
      "Writes <output.dir>/metrics.jsonl (one JSON object per step), recipe.yaml (effective "
      "recipe) and final/ (the trained model, HF layout). dist.nproc_per_node=N runs N local "
      "workers; see docs/distributed.md for several nodes, torchrun, mpirun and srun.");
  return {sub, [o] { return run(*o); }};
}

}  // namespace kiln::cli
