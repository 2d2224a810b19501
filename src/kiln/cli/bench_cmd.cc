// kiln bench train: tokens/s, step time, achieved GFLOP/s and fraction of the machine's measured
// peak of full training steps (forward, backward, AdamW) on randomly initialised shapes, with
// peak memory (RSS high-water) beside an analytic estimate, activation checkpointing off and on.
// With --lora RANK the step is a LoRA step instead (adapters on all seven projections, alpha
// 2 x rank, no dropout, a frozen base: AdamW steps the adapters only), its FLOPs the LoRA
// step's (train_flops with the LoraConfig). Prints figures; never judges them.
// bench/pytorch_train_bench.py prints the same columns for PyTorch on the same shapes
// (bench/compare_train.sh runs both and prints the ratios).
//
// Each (shape, recompute) row runs in a fresh child process (this binary re-executed with
// --row), so its peak RSS is its own and not the high-water mark of an earlier, larger shape.
// Before each row, indented lines give the first step's loss per target beside ln(vocabulary)
// (what an untrained model's loss is near: a broken kernel shows at once) and, per phase, the
// profiled step's time with the phase's estimated FLOPs and bytes (model/phase_costs.h) for a
// roofline comparison (scripts/gpu_check_report.py makes it); the row stays the last line.
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "kiln/base/cpu_time.h"
#include "kiln/base/error.h"
#include "kiln/cli/commands.h"
#include "kiln/cli/self_command.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/kernels/device/host_cpu.h"
#include "kiln/kernels/phase_timed_backend.h"
#include "kiln/model/decoder.h"
#include "kiln/model/init.h"
#include "kiln/model/lora_config.h"
#include "kiln/model/lora_layout.h"
#include "kiln/model/phase_costs.h"
#include "kiln/train/optimizer.h"

namespace kiln::cli {

namespace {

struct BenchOpts {
  std::vector<std::string> presets;  // empty: the fixed shape set
  int batch = 1, seq = 256, steps = 0, warmup = -1;
  std::string recompute = "both";  // off | on | both
  std::string dtype = "fp32";
  std::string device = "auto";  // train.device: auto | cpu | cuda
  int lora = 0;                 // LoRA rank; 0: full fine-tuning
  bool quick = false;
  bool list = false;  // print the rows (preset batch seq steps warmup) and exit
  bool row = false;   // internal: run one row in this process and print it
  double peak_fp32 = 0, peak_bf16 = 0;
};

// One benchmark row: a shape, a batch, and its default step counts.
struct Shape {
  std::string preset;
  int batch, seq, steps, warmup;
};

// The shapes (docs/performance.md): hidden-64, ~25M, hidden-512, qwen2.5-0.5b.
// bench/pytorch_train_bench.py lists the same.
const std::vector<Shape>& fixed_shapes() {
  static const std::vector<Shape> s = {
      {"bench-h64", 1, 256, 20, 3},   {"bench-h64", 4, 256, 10, 2}, {"25m", 1, 256, 5, 2},
      {"bench-h512", 1, 256, 4, 1},   {"bench-h512", 4, 512, 3, 1}, {"qwen2.5-0.5b", 1, 256, 3, 1},
      {"qwen2.5-0.5b", 1, 512, 3, 1},
  };
  return s;
}

// A field of /proc/self/status in KiB ("VmHWM", "VmRSS"); 0 when unreadable.
double proc_status_kib(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream is(line.substr(field.size() + 1));
      double kib = 0;
      is >> kib;
      return kib;
    }
  }
  return 0;
}

// The LoRA of `kiln bench train --lora RANK`: all seven projections, alpha 2 x rank (the usual
// choice), no dropout; nothing for rank 0.
std::optional<LoraConfig> bench_lora(int rank) {
  if (rank == 0) return std::nullopt;
  LoraConfig l;
  l.rank = rank;
  l.alpha = 2.0 * rank;
  l.dropout = 0.0;
  l.targets = resolve_lora_targets({kAllLinear}, "bench train --lora");
  return l;
}

// Memory of one training step in bytes: `state`, what the parameters, gradients and optimizer
// state hold (read from the row's ParamStore and Optimizer, so a LoRA run's frozen base counts in
// the dtype ParamStore stores it in: stored_dtype, bf16 under --dtype bf16; the adapters 16 bytes
// per parameter, as full fine-tuning), plus the analytic size of what Decoder holds (see
// decoder.cc plan_buffers()): the residual stream at every layer boundary, each layer's saved
// activations (one layer's when recomputing), the backward scratch, and the fused
// cross-entropy's logits chunk. `act_bytes`: bytes per element of the activations that only feed
// products (xn1, xn2, h: 2 when stored in bf16). With LoRA Decoder also holds each layer's u's
// (one layer's when recomputing) and the adapters' scratch (plan_lora_buffers()).
double estimate_bytes(const ModelConfig& c, int B, int T, bool recompute, double act_bytes,
                      const std::optional<LoraConfig>& lora, double state) {
  const double N = static_cast<double>(B) * T, C = c.hidden_size, I = c.intermediate_size;
  const double Q = c.q_dim(), KV = c.kv_dim(), H = c.num_attention_heads, V = c.vocab_size;
  const double L = c.num_hidden_layers;
  // per layer, in floats: q, k, v, y, xmid, gate, up, rstd1/2, lse; then xn1, xn2, h
  // (with q/k norms also q_pre, k_pre and their rstd)
  const double qk = c.qk_norm ? N * (Q + KV + H + c.num_key_value_heads) : 0;
  const double per_layer = 2 * N * Q + 2 * N * KV + N * C + 2 * N * I + 2 * N + N * H + qk +
                           (act_bytes / 4.0) * (2 * N * C + N * I);
  const double stored = recompute ? 1 : L;
  const double resid = (L + 1) * N * C;
  const double final_norm = 2 * N * C + N;
  const double scratch = 2 * N * C + 2 * N * Q + 2 * N * KV + 3 * N * I;
  const double ce_rows =
      static_cast<double>(ce_chunk_rows(static_cast<size_t>(N), static_cast<size_t>(V)));
  const double ce = ce_rows * (V + 2 * C);
  double adapters = 0;  // floats
  if (lora) {
    LoraOffsets o;
    (void)lora_unit(c, *lora, 0, &o);
    const double M = static_cast<double>(o.max_out()), R = static_cast<double>(o.max_ranks());
    adapters = stored * N * static_cast<double>(o.total_ranks()) + (act_bytes / 4.0) * M * R +
               N * M + M * R + M * static_cast<double>(o.rank) + N * R;
  }
  return state + 4.0 * (stored * per_layer + resid + final_norm + scratch + ce + adapters);
}

void fill_batch(Batch& b, const ModelConfig& c, int B, int T) {
  b.resize(B, T);
  SplitMix64 rng{7};
  for (size_t i = 0; i < b.input_ids.size(); ++i) {
    b.input_ids[i] = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(c.vocab_size));
    b.positions[i] = static_cast<int32_t>(i % T);
  }
  for (size_t i = 0; i + 1 < b.input_ids.size(); ++i) {
    if ((i + 1) % T != 0) b.targets[i] = b.input_ids[i + 1];
  }
}

std::unique_ptr<Backend> backend_for(const std::string& device, const std::string& dtype) {
  try {
    return make_backend(parse_named(kDeviceRequestNames, device, "--device"),
                        parse_named(kComputeDTypeNames, dtype, "--dtype"));
  } catch (const Error& e) {
    fail("bench train --device {} --dtype {}: no such backend here ({})", device, dtype, e.what());
  }
}

// The share of each phase in the profiled step, in the header's order, and its time.
std::string phase_columns(const PhaseSeconds& p) {
  std::string out;
  const double total = p.total();
  for (int i = 0; i < kNumPhases; ++i) {
    out += fmt::format("{:>6.1f}", total > 0 ? 100.0 * p.seconds[i] / total : 0.0);
  }
  return out + fmt::format(" {:>8.4f}", total);
}

// Runs one row in this process and prints it.
void run_row(const BenchOpts& o) {
  const std::string& preset = o.presets.at(0);
  const double base_kib = proc_status_kib("VmRSS");
  const ModelConfig c = preset_config(preset);
  const bool recompute = o.recompute == "on";
  const std::optional<LoraConfig> lora = bench_lora(o.lora);
  const LoraConfig* lora_ptr = lora ? &*lora : nullptr;
  const std::unique_ptr<Backend> device = backend_for(o.device, o.dtype);
  PhaseTimedBackend timed(*device);  // times ops only in the last, untimed step
  const Backend* be = &timed;
  Decoder model(c, *be, lora);
  ParamStore store(model.layout(), *be);
  init_params(store, model.layout(), 1);
  std::vector<ShardRange> shards;
  for (const auto& u : model.layout().units()) shards.push_back({0, u.numel});
  Optimizer opt(OptimizerSettings{}, model.layout(), shards, *be);
  double state = static_cast<double>(store.param_bytes() + store.grad_bytes());
  for (int u = 0; u < store.num_units(); ++u) {
    state += static_cast<double>(opt.m(u).bytes() + opt.v(u).bytes());
  }
  Batch b;
  fill_batch(b, c, o.batch, o.seq);
  const float scale = 1.0f / static_cast<float>(b.num_targets());
  // Returns the step's loss sum (read back at the end of forward and backward).
  const auto step = [&] {
    store.zero_grads();
    const double loss_sum = model.forward_backward(b, store, scale, recompute);
    opt.begin_step();
    for (int u = 0; u < store.num_units(); ++u) {
      if (!model.layout().units()[u].trainable) continue;  // LoRA's frozen base
      opt.step(u, store.params(u).data(), store.grads(u).data(), 1e-4);
    }
    be->synchronize();
    return loss_sum;
  };
  std::vector<double> times;
  double busy0 = 0, own0 = 0, first_loss = 0;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    if (s == o.warmup) busy0 = machine_busy_seconds(), own0 = own_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    const double loss_sum = step();
    if (s == 0) first_loss = loss_sum / static_cast<double>(b.num_targets());
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= o.warmup) times.push_back(dt);
  }
  const double others = (machine_busy_seconds() - busy0) - (own_cpu_seconds() - own0);
  // One more step with a timed event after every op, for the time per phase.
  timed.start();
  step();
  const PhaseSeconds phases = timed.stop();

  std::sort(times.begin(), times.end());
  const double med = times[times.size() / 2];
  const int64_t tokens = static_cast<int64_t>(o.batch) * o.seq;
  const double gflops = train_flops(c, tokens, o.seq, b.num_targets(), lora_ptr) / med / 1e9;
  // The CPU's peak was measured once by the parent; a GPU's comes from its properties.
  const double peak = be->device() == Device::kCuda ? be->peak_flops() / 1e9
                      : o.dtype == "bf16"           ? o.peak_bf16
                                                    : o.peak_fp32;
  const double hwm_mib = proc_status_kib("VmHWM") / 1024.0;
  std::printf("  first_loss %.4f ln_vocab %.4f\n", first_loss,
              std::log(static_cast<double>(c.vocab_size)));
  const double total = static_cast<double>(model.layout().total_numel());
  const double trained = static_cast<double>(model.layout().trainable_numel());
  if (lora) {
    std::printf(
        "  lora rank %lld alpha %g all-linear: %.0f trainable of %.0f parameters (%.2f%%)\n",
        static_cast<long long>(lora->rank), lora->alpha, trained, total, 100.0 * trained / total);
  }
  const PhaseCosts costs =
      phase_costs(c, {.tokens = tokens,
                      .seq = o.seq,
                      .head_rows = b.num_targets(),
                      .act_bytes = static_cast<double>(dtype_size(be->activation_dtype())),
                      .recompute = recompute,
                      .lora = lora_ptr});
  for (int i = 0; i < kNumPhases; ++i) {
    std::printf("  phase %-9s %10.6f s %11.4e flop %11.4e bytes\n",
                std::string(phase_name(static_cast<Phase>(i))).c_str(), phases.seconds[i],
                costs[i].flops, costs[i].bytes);
  }
  // params: the model's; a LoRA row's "trainable/base", e.g. 8.8M/494.0M.
  const std::string params =
      lora ? fmt::format("{:.2f}M/{:.1f}M", trained / 1e6, parameter_count(c) / 1e6)
           : fmt::format("{:.1f}M", parameter_count(c) / 1e6);
  std::printf(
      "%-13s %8s %3dx%-4d %-4s %-4s %9.4f %9.0f %8.1f %6.1f%% %8.0f %8.0f %7.0f %9.1f %8.0f "
      "%s\n",
      preset.c_str(), params.c_str(), o.batch, o.seq, o.dtype.c_str(), recompute ? "on" : "off",
      med, tokens / med, gflops, peak > 0 ? 100.0 * gflops / peak : 0.0, hwm_mib,
      estimate_bytes(c, o.batch, o.seq, recompute,
                     static_cast<double>(dtype_size(be->activation_dtype())), lora, state) /
          1048576.0,
      base_kib / 1024.0, others, be->memory_stats().peak / 1048576.0,
      phase_columns(phases).c_str());
  std::fflush(stdout);
}

// Runs one row in a fresh child process (this executable with --row) and forwards its output.
void run_child(const Shape& sh, bool recompute, const BenchOpts& o) {
  std::string cmd = self_command("bench train") + " bench train --row --preset " +
                    shell_quote(sh.preset) + " --batch " + std::to_string(sh.batch) + " --seq " +
                    std::to_string(sh.seq) + " --steps " + std::to_string(sh.steps) + " --warmup " +
                    std::to_string(sh.warmup) + " --recompute " + (recompute ? "on" : "off") +
                    " --dtype " + shell_quote(o.dtype) + " --device " + shell_quote(o.device) +
                    " --lora " + std::to_string(o.lora) + " --peak-fp32 " +
                    std::to_string(o.peak_fp32) + " --peak-bf16 " + std::to_string(o.peak_bf16);
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    fail("bench train: the run for {} {}x{} recompute {} failed (exit status {})", sh.preset,
         sh.batch, sh.seq, recompute ? "on" : "off", rc);
  }
}

int run_bench(BenchOpts o) {
  if (o.recompute != "off" && o.recompute != "on" && o.recompute != "both") {
    fail("bench train: --recompute must be off, on or both, got '{}'", o.recompute);
  }
  if (o.dtype != "fp32" && o.dtype != "bf16") {
    fail("bench train: --dtype must be fp32 or bf16, got '{}'", o.dtype);
  }
  if (o.batch < 1 || o.seq < 2 || o.steps < 0)
    fail("bench train: batch >= 1, seq >= 2, steps >= 1");
  if (o.lora < 0)
    fail("bench train: --lora must be a rank >= 1, or 0 for full fine-tuning, got {}", o.lora);
  if (o.row) {
    if (o.presets.size() != 1 || o.recompute == "both")
      fail("bench train --row: one preset, one mode");
    if (o.steps == 0) o.steps = 5;
    if (o.warmup < 0) o.warmup = 2;
    run_row(o);
    return 0;
  }
  for (const auto& p : o.presets) preset_config(p);  // unknown names fail before any run
  (void)backend_for(o.device, o.dtype);              // so does an unavailable device or dtype

  std::vector<Shape> shapes;
  if (!o.presets.empty()) {
    for (const auto& p : o.presets) shapes.push_back({p, o.batch, o.seq, 5, 2});
  } else if (o.quick) {
    shapes = {{"bench-h64", 1, 256, 10, 2}, {"25m", 1, 256, 3, 1}};
  } else {
    shapes = fixed_shapes();
  }
  for (auto& s : shapes) {
    if (o.steps > 0) s.steps = o.steps;
    if (o.warmup >= 0) s.warmup = o.warmup;
  }
  if (o.list) {
    for (const auto& s : shapes) {
      std::printf("%s %d %d %d %d\n", s.preset.c_str(), s.batch, s.seq, s.steps, s.warmup);
    }
    return 0;
  }
  o.peak_fp32 = measure_fp32_peak_gflops();
  o.peak_bf16 = measure_bf16_peak_gflops();
  std::printf(
      "kiln bench train: %d threads, dtype %s, %s; measured peak fp32 %.1f GFLOP/s (FMA loop), "
      "bf16 %s\n",
      omp_get_max_threads(), o.dtype.c_str(),
      o.lora > 0
          ? fmt::format("LoRA rank {} (all-linear, alpha {}, frozen base)", o.lora, 2 * o.lora)
                .c_str()
          : "full fine-tuning",
      o.peak_fp32,
      o.peak_bf16 > 0
          ? (std::to_string(static_cast<int>(o.peak_bf16 + 0.5)) + " GFLOP/s (vdpbf16ps loop)")
                .c_str()
          : "n/a (no AVX512_BF16)");
  std::printf(
      "median step after warm-up; GFLOP/s = (6 x matmul params x tokens + attention) / "
      "step time (LoRA: 4 x base matmul params x tokens, no weight gradients, + 6 x adapter "
      "params x tokens + attention; recompute's extra forward not counted); params: a LoRA "
      "row's trainable/base; rss = peak RSS of the row's own "
      "process, est = 16 B/param (LoRA: 4 B/base param, 16 B/adapter param) + activations, base = "
      "RSS before the model, dev = peak of the "
      "backend's device allocations (device %s); gemm%% .. other%% = share of one more step's "
      "time by phase (gemm: the layers' products; lmh: fused LM head and loss; attn: attention; "
      "opt: optimizer; other: norms, RoPE, SwiGLU, embedding, copies), timed by an event after "
      "every op, phase_s = that step's time (one process: no communication; `kiln bench comm` "
      "times collectives); the indented lines before a row give its first step's loss beside "
      "ln(vocabulary) and each phase's time with its estimated FLOPs and bytes\n",
      o.device.c_str());
  std::printf(
      "%-13s %8s %-8s %-4s %-4s %9s %9s %8s %7s %8s %8s %7s %9s %8s %6s %6s %6s %6s %6s "
      "%8s\n",
      "shape", "params", "BxT", "type", "rcmp", "step_s", "tokens/s", "GFLOP/s", "peak", "rss_MiB",
      "est_MiB", "base", "other_cpu", "dev_MiB", "gemm%", "lmh%", "attn%", "opt%", "other%",
      "phase_s");
  for (const auto& s : shapes) {
    if (o.recompute != "on") run_child(s, false, o);
    if (o.recompute != "off") run_child(s, true, o);
  }
  return 0;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOpts>();
  CLI::App* sub = app.add_subcommand("bench", "Benchmarks that print figures");
  CLI::App* tr = sub->add_subcommand(
      "train", "Training-step throughput and peak memory on the fixed shape set, or --preset");
  sub->require_subcommand(1);
  tr->add_option("--preset", o->presets, "Presets to run instead of the fixed shape set");
  tr->add_option("--batch", o->batch, "Micro-batch rows (with --preset)")->capture_default_str();
  tr->add_option("--seq", o->seq, "Sequence length (with --preset)")->capture_default_str();
  tr->add_option("--steps", o->steps, "Timed steps, median reported (default: per shape)");
  tr->add_option("--warmup", o->warmup, "Untimed warm-up steps (default: per shape)");
  tr->add_option("--recompute", o->recompute, "Activation checkpointing: off, on or both")
      ->capture_default_str();
  tr->add_option("--dtype", o->dtype, "Compute dtype: fp32 or bf16")->capture_default_str();
  tr->add_option("--device", o->device, "Device: auto, cpu or cuda (as train.device)")
      ->capture_default_str();
  tr->add_option("--lora", o->lora,
                 "LoRA rank (all seven projections, alpha 2 x rank, frozen base); 0: full "
                 "fine-tuning")
      ->capture_default_str();
  tr->add_flag("--quick", o->quick, "Only the small shapes (hidden-64 and 25m), few steps");
  tr->add_flag("--list", o->list,
               "Print the rows it would run (preset batch seq steps warmup) and exit");
  tr->add_flag("--row", o->row, "Internal: run one row in this process")->group("");
  tr->add_option("--peak-fp32", o->peak_fp32, "Internal: measured fp32 peak")->group("");
  tr->add_option("--peak-bf16", o->peak_bf16, "Internal: measured bf16 peak")->group("");
  const Command comm = add_bench_comm(*sub);
  const Command dpo = add_bench_dpo(*sub);
  return {sub, [o, comm, dpo] {
            if (comm.app->parsed()) return comm.run();
            if (dpo.app->parsed()) return dpo.run();
            return run_bench(*o);
          }};
}

}  // namespace kiln::cli
