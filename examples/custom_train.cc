// A user's own training function on kiln's runtime: the same launcher (local workers, several
// nodes, torchrun/mpirun/srun ranks), the same group formation and communicator, and
// report(metrics), with no kiln trainer involved.
//
//   build/bin/kiln_custom_train_example --nproc 2
//
// Each worker contributes (rank + 1) to an all-reduce, and rank 0 reports the sum.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/launch/launch.h"

int main(int argc, char** argv) {
  kiln::init_logging();
  CLI::App app{"kiln runtime API example"};
  int nproc = 1;
  app.add_option("--nproc", nproc, "Workers on this machine");
  CLI11_PARSE(app, argc, argv);
  kiln::LaunchOptions lo;
  lo.nproc_per_node = nproc;
  lo.timeout_s = 60;
  for (int i = 1; i < argc; ++i) lo.worker_args.emplace_back(argv[i]);
  try {
    return kiln::launch(lo, [](kiln::WorkerContext& ctx) {
      ctx.reporter = [](const kiln::Json& m) { std::printf("report: %s\n", m.dump().c_str()); };
      float x = static_cast<float>(ctx.rank + 1);
      ctx.comm->all_reduce(&x, 1, kiln::ReduceOp::kSum);
      if (ctx.rank == 0) ctx.report({{"world_size", ctx.world_size}, {"sum", x}});
      return 0;
    });
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
