// kiln bench train: tokens/s and achieved GFLOP/s of full training steps (forward, backward,
// AdamW) on randomly initialised presets. Prints figures; never judges them.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "kiln/base/cpu_time.h"
#include "kiln/base/error.h"
#include "kiln/cli/commands.h"
#include "kiln/model/init.h"
#include "kiln/model/qwen2.h"
#include "kiln/train/optimizer.h"

namespace kiln::cli {

namespace {

struct BenchOpts {
  std::vector<std::string> presets = {"tiny", "25m"};
  int batch = 1, seq = 256, steps = 5, warmup = 2;
  bool recompute = false;
};

void bench_one(const std::string& preset, const BenchOpts& o) {
  const Qwen2Config c = preset_config(preset);
  Qwen2Model model(c, cpu_backend());
  ParamStore store(model.layout());
  init_params(store, model.layout(), 1);
  std::vector<ShardRange> shards;
  for (const auto& u : model.layout().units()) shards.push_back({0, u.numel});
  Optimizer opt(OptimizerSettings{}, model.layout(), shards);
  Batch b;
  b.resize(o.batch, o.seq);
  SplitMix64 rng{7};
  for (size_t i = 0; i < b.input_ids.size(); ++i) {
    b.input_ids[i] = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(c.vocab_size));
    b.positions[i] = static_cast<int32_t>(i % o.seq);
  }
  for (size_t i = 0; i + 1 < b.input_ids.size(); ++i) {
    if ((i + 1) % o.seq != 0) b.targets[i] = b.input_ids[i + 1];
  }
  const float scale = 1.0f / static_cast<float>(b.num_targets());
  std::vector<double> times;
  const double busy0 = machine_busy_seconds(), own0 = own_cpu_seconds();
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    store.zero_grads();
    model.forward_backward(b, store, scale, o.recompute);
    opt.begin_step();
    for (int u = 0; u < store.num_units(); ++u) {
      opt.step(u, store.params(u).data(), store.grads(u).data(), 1e-4);
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= o.warmup) times.push_back(dt);
  }

  std::sort(times.begin(), times.end());
  const double med = times[times.size() / 2];
  const int64_t tokens = static_cast<int64_t>(o.batch) * o.seq;
  const double gflops = train_flops(c, tokens, o.seq) / med / 1e9;
  const double others = (machine_busy_seconds() - busy0) - (own_cpu_seconds() - own0);
  std::printf("%-14s %7.1fM  %2dx%-5d %9.4f %10.0f %9.1f %8.0f %9.1f %s\n", preset.c_str(),
              parameter_count(c) / 1e6, o.batch, o.seq, med, tokens / med, gflops,
              model.activation_bytes() / 1048576.0, others, o.recompute ? "on" : "off");
  std::fflush(stdout);
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOpts>();
  CLI::App* sub = app.add_subcommand("bench", "Benchmarks that print figures");
  CLI::App* tr = sub->add_subcommand("train", "Training-step throughput on random presets");
  sub->require_subcommand(1);
  tr->add_option("--preset", o->presets, "Presets to run")->capture_default_str();
  tr->add_option("--batch", o->batch, "Micro-batch rows")->capture_default_str();
  tr->add_option("--seq", o->seq, "Sequence length")->capture_default_str();
  tr->add_option("--steps", o->steps, "Timed steps (median reported)")->capture_default_str();
  tr->add_option("--warmup", o->warmup, "Untimed warm-up steps")->capture_default_str();
  tr->add_flag("--recompute", o->recompute, "Activation recomputation");
  const Command comm = add_bench_comm(*sub);
  return {sub, [o, comm] {
            if (comm.app->parsed()) return comm.run();
            if (o->steps < 1 || o->batch < 1 || o->seq < 2)
              fail("bench: steps, batch >= 1, seq >= 2");
            std::printf("kiln bench train: %d threads, median of %d steps after %d warm-up\n",
                        omp_get_max_threads(), o->steps, o->warmup);
            std::printf("%-14s %8s  %-8s %9s %10s %9s %8s %9s %s\n", "preset", "params", "BxT",
                        "step_s", "tokens/s", "GFLOP/s", "act_MiB", "other_cpu", "recompute");
            for (const auto& p : o->presets) bench_one(p, *o);
            return 0;
          }};
}

}  // namespace kiln::cli
