// kiln train RECIPE.yaml [key=value ...] [--nnodes ... --node-rank ... --master-addr/--port ...]
// Single process, N local workers (dist.nproc_per_node=N), kiln as the agent on every node, or
// ranks of an external launcher: launch() decides (src/kiln/launch/launch.h).
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/base/stop_request.h"
#include "kiln/cli/commands.h"
#include "kiln/launch/launch.h"
#include "kiln/train/preflight.h"
#include "kiln/train/run_identity.h"
#include "kiln/train/trainer.h"

namespace kiln::cli {

namespace {

// "trained 60 steps", or after a resume from step 29 "trained steps 30-60 (31 this run)": what
// this invocation trained, beside where the run now is.
std::string trained_steps(const TrainResult& res) {
  if (res.start_step == 0) return fmt::format("trained {} steps", res.steps);
  return fmt::format("trained steps {}-{} ({} this run)", res.start_step + 1, res.steps,
                     res.steps - res.start_step);
}

}  // namespace

Command add_train(CLI::App& app) {
  struct Opts {
    std::string recipe;
    std::vector<std::string> overrides;
    TopologyFlags flags;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "train", "Train a model from a YAML recipe; key=value arguments override recipe keys");
  sub->add_option("recipe", o->recipe, "Recipe YAML (keys: docs/recipe.md)")->required();
  sub->add_option("overrides", o->overrides, "Overrides such as optimizer.lr=1e-4");
  sub->add_option("--nnodes", o->flags.nnodes, "Number of nodes (kiln runs as the agent on each)");
  sub->add_option("--node-rank", o->flags.node_rank, "This node's rank");
  sub->add_option("--nproc-per-node", o->flags.nproc_per_node,
                  "Workers on this node (default: dist.nproc_per_node)");
  sub->add_option("--master-addr", o->flags.master_addr, "Address of node 0 (hosts the store)");
  sub->add_option("--master-port", o->flags.master_port, "Port of the store on node 0");
  sub->footer(
      "Writes <output.dir>/metrics.jsonl (one JSON object per step), recipe.yaml (effective "
      "recipe), final/ (the trained model, HF layout) and, if a collective hangs, hang/ (one "
      "report per rank). dist.nproc_per_node=N runs N local workers; docs/distributed.md covers "
      "several nodes, torchrun, mpirun and srun.");
  return {sub, [o] {
            const Recipe r = load_recipe(o->recipe, o->overrides);
            // Checks that need no worker, once, by the process that starts them (not again by
            // each spawned worker, nor by an agent re-run in its private network).
            if (std::getenv("KILN_WORKER") == nullptr && !in_private_network()) {
              preflight_checks(r);
            }
            LaunchOptions lo;
            lo.flags = o->flags;
            lo.nproc_per_node = r.dist.nproc_per_node;
            lo.threads_per_worker = r.dist.threads_per_worker;
            lo.timeout_s = r.dist.timeout_s;
            lo.worker_args = {"train", o->recipe};
            lo.worker_args.insert(lo.worker_args.end(), o->overrides.begin(), o->overrides.end());
            lo.max_restarts = static_cast<int>(r.failure.max_restarts);
            lo.restart_args = {"train.resume=auto"};
            // The run directory: the trainer's metrics.jsonl writer (WorkerContext) and, below
            // it, hang/ with every worker's hang report.
            lo.run_dir = r.output.dir;
            lo.lock_dir = r.output.dir;
            lo.graceful_stop = true;
            lo.sigterm_grace_s = r.failure.sigterm_grace_s;
            lo.device = r.train.device;
            lo.communicator = r.dist.communicator;
            lo.private_network = r.dist.private_network;
            lo.authenticate_pairs = r.dist.authenticate_pairs;
            lo.identity = run_identity_values(r);
            return launch(lo, [&](WorkerContext& ctx) {
              TrainResult res = train(r, ctx);
              const bool lead = ctx.identity().rank == 0;
              if (res.stopped) {
                if (lead) {
                  std::fprintf(stderr,
                               "kiln: stopped on request after step %lld; train.resume=auto "
                               "continues from its checkpoint (exit code %d)\n",
                               static_cast<long long>(res.steps), kExitStopped);
                }
                return kExitStopped;
              }
              if (res.nothing_to_do) {
                if (lead) {
                  std::fprintf(stderr,
                               "kiln: nothing to do: %s is at step %lld, its last; model in %s\n",
                               r.output.dir.c_str(), static_cast<long long>(res.steps),
                               res.model_dir.c_str());
                }
                return 0;
              }
              if (lead) {
                const std::string trained = trained_steps(res);
                std::fprintf(stderr, "%s: loss %.4f -> %.4f; model in %s\n", trained.c_str(),
                             res.first_loss, res.last_loss, res.model_dir.c_str());
              }
              return 0;
            });
          }};
}

}  // namespace kiln::cli
