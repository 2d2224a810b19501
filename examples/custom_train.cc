// A user's own training function on kiln's runtime: the same launcher (local workers, several
// nodes, torchrun/mpirun/srun ranks), the same group formation and communicator, report() and
// latest_checkpoint(), with no kiln trainer involved.
//
//   build/bin/kiln_custom_train_example --nproc 2
//   build/bin/kiln_custom_train_example --nproc 2 --out runs/toy --steps 8 --max-restarts 1
//
// Each worker contributes (rank + 1) to an all-reduce, and rank 0 reports the sum. With --out,
// the workers then fit a small vector data-parallel (each rank's gradient from its own targets,
// averaged by an all-reduce), and after every step each rank writes its state to a directory of
// its own and calls report(metrics, dir): kiln commits the parts as out/checkpoints/step-N. A
// restarted worker group resumes from latest_checkpoint(), so a killed run (--max-restarts)
// finishes with the same result as an uninterrupted one (out/result.txt).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/log.h"
#include "kiln/launch/launch.h"

namespace {

constexpr int kDim = 8;

// One step of the toy problem on this rank: loss 0.5 |w - t|^2 with targets t that depend on
// the rank and the step; returns the loss and writes the gradient.
double local_grad(const std::vector<float>& w, int rank, int64_t step, std::vector<float>& g) {
  double loss = 0;
  for (int i = 0; i < kDim; ++i) {
    const float t = std::sin(0.37f * static_cast<float>(i + 1) * static_cast<float>(rank + 1) +
                             0.11f * static_cast<float>(step));
    g[i] = w[i] - t;
    loss += 0.5 * g[i] * g[i];
  }
  return loss;
}

int train_toy(kiln::WorkerContext& ctx, int64_t steps) {
  const int rank = ctx.identity().rank;
  std::vector<float> w(kDim, 0.0f), g(kDim);
  int64_t start = 0;
  if (auto ckpt = ctx.latest_checkpoint()) {
    // Every rank reads its own part (here all parts are equal: data-parallel replicas).
    const std::string bytes = kiln::read_file(ctx.checkpoint_part(*ckpt) / "state.bin");
    if (bytes.size() != sizeof(int64_t) + kDim * sizeof(float)) {
      kiln::fail("{}: unexpected size", (ctx.checkpoint_part(*ckpt) / "state.bin").string());
    }
    std::memcpy(&start, bytes.data(), sizeof start);
    std::memcpy(w.data(), bytes.data() + sizeof start, kDim * sizeof(float));
    if (rank == 0) std::printf("resumed from %s (step %lld)\n", ckpt->c_str(), (long long)start);
  }
  const kiln::fs::path scratch = ctx.run_dir() / "scratch" / fmt::format("rank-{:05d}", rank);
  for (int64_t step = start + 1; step <= steps; ++step) {
    ctx.begin_step(step);
    double loss = local_grad(w, rank, step, g);
    ctx.comm().all_reduce(g.data(), g.size(), kiln::ReduceOp::kMean);
    ctx.comm().all_reduce(&loss, size_t{1}, kiln::ReduceOp::kMean);
    for (int i = 0; i < kDim; ++i) w[i] -= 0.3f * g[i];
    // This rank's state, in a directory of its own; report() copies it into the checkpoint.
    kiln::fs::remove_all(scratch);
    kiln::fs::create_directories(scratch);
    std::string bytes(sizeof step + kDim * sizeof(float), '\0');
    std::memcpy(bytes.data(), &step, sizeof step);
    std::memcpy(bytes.data() + sizeof step, w.data(), kDim * sizeof(float));
    kiln::write_file_atomic(scratch / "state.bin", bytes);
    ctx.report({{"step", step}, {"loss", loss}}, scratch);
    ctx.end_step(step);
  }
  if (rank == 0) {
    std::string out;
    for (float x : w) out += fmt::format("{:a} ", x);
    kiln::write_file_atomic(ctx.run_dir() / "result.txt", out + "\n");
    std::printf("result: %s\n", out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  kiln::init_logging();
  CLI::App app{"kiln runtime API example"};
  int nproc = 1;
  std::string out;
  int64_t steps = 8;
  int max_restarts = 0;
  double timeout_s = 60;
  app.add_option("--nproc", nproc, "Workers on this machine");
  app.add_option("--out", out, "Run directory: checkpoints, metrics.jsonl, result.txt");
  app.add_option("--steps", steps, "Steps of the toy problem (with --out)");
  app.add_option("--max-restarts", max_restarts, "Restarts of the worker group after a failure");
  app.add_option("--timeout-s", timeout_s, "dist.timeout_s: collectives, and hang reports");
  CLI11_PARSE(app, argc, argv);
  kiln::LaunchOptions lo;
  lo.nproc_per_node = nproc;
  lo.timeout_s = timeout_s;
  lo.run_dir = out;
  lo.keep_last = 2;
  lo.max_restarts = max_restarts;
  for (int i = 1; i < argc; ++i) lo.worker_args.emplace_back(argv[i]);
  try {
    return kiln::launch(lo, [&](kiln::WorkerContext& ctx) {
      ctx.reporter = [](const kiln::Json& m) {
        if (!m.contains("checkpoint")) std::printf("report: %s\n", m.dump().c_str());
      };
      const kiln::WorkerIdentity& me = ctx.identity();
      float x = static_cast<float>(me.rank + 1);
      ctx.comm().all_reduce(&x, 1, kiln::ReduceOp::kSum);
      if (me.rank == 0 && out.empty()) ctx.report({{"world_size", me.world_size}, {"sum", x}});
      return out.empty() ? 0 : train_toy(ctx, steps);
    });
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
