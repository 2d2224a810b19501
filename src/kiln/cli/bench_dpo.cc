// kiln bench dpo: what a preference (DPO) step costs beside a supervised step on the same
// sequences: a DPO step on N pairs with a live reference (its forward, then the policy's forward
// and backward through the preference head) and with a precomputed one (dpo.precompute_reference:
// a table) against an SFT step on the same 2N rows, through the trainer's own TrainCore, the sides
// alternating round by round, medians printed; with --lora, each side's peak memory (RSS on the
// CPU, the backend's device peak on a GPU) in child processes of its own (the reference is then
// the base with the adapters off: no second copy). Prints figures; never judges them.
//
//   kiln bench dpo [--preset 25m] [--pairs 2] [--seq 256] [--rounds 5] [--lora RANK]
//                  [--memory-rounds 3] [--device auto|cpu|cuda] [--dtype fp32|bf16]
//
// Random weights and tokens; each row's first half is its prompt (no loss), the second its
// completion.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/named_values.h"
#include "kiln/base/process_memory.h"
#include "kiln/cli/commands.h"
#include "kiln/cli/self_command.h"
#include "kiln/comm/communicator.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/kernels/device/host_cpu.h"
#include "kiln/model/init.h"
#include "kiln/train/reference_table.h"
#include "kiln/train/train_core.h"

namespace kiln::cli {
namespace {

struct Opts {
  std::string preset = "25m";
  int pairs = 2, seq = 256, rounds = 5, lora = 0;
  int memory_rounds = 3;  // with --lora: child processes per side for the peak memory
  std::string device = "auto", dtype = "fp32";
  std::string row;  // internal: "sft" or "dpo", one side's peak memory in this process
};

// 2N rows: pair p's chosen in row 2p, its rejected in row 2p + 1; prompts share their tokens.
Batch make_batch(const Opts& o, int64_t vocab) {
  Batch b;
  b.resize(2 * o.pairs, o.seq);
  SplitMix64 rng{17};
  for (int r = 0; r < b.B; ++r) {
    for (int t = 0; t < b.T; ++t) {
      const size_t i = static_cast<size_t>(r) * b.T + t;
      const bool prompt = t < b.T / 2;
      b.input_ids[i] = static_cast<int32_t>(prompt ? (r / 2 * 7919 + t * 31) % vocab
                                                   : static_cast<int64_t>(rng.next() % vocab));
      b.positions[i] = t;
    }
    b.examples[static_cast<size_t>(r)] = r / 2;  // pair r / 2 of a precomputed table
    for (int t = b.T / 2 - 1; t + 1 < b.T; ++t) {
      b.targets[static_cast<size_t>(r) * b.T + t] =
          b.input_ids[static_cast<size_t>(r) * b.T + t + 1];
    }
  }
  return b;
}

enum class Kind { kSft, kDpo, kDpoPrecomputed };

std::optional<DpoConfig> dpo_of(Kind k) {
  if (k == Kind::kSft) return std::nullopt;
  DpoConfig d;
  d.precompute_reference = k == Kind::kDpoPrecomputed;
  return d;
}

// Every unit's random starting values, drawn once for all the sides (the draw is most of a
// large preset's set-up).
using UnitValues = std::vector<std::vector<float>>;

UnitValues unit_values(const ParamLayout& layout) {
  UnitValues v(layout.units().size());
  for (size_t u = 0; u < v.size(); ++u) {
    v[u].resize(layout.units()[u].numel);
    init_unit_values(layout, static_cast<int>(u), 5, v[u].data());
  }
  return v;
}

// One side's training core, its weights (and a DPO run's reference) the values above; a
// precomputed reference reads a table (of zeros: the values cost nothing).
struct Side {
  std::unique_ptr<Communicator> comm = make_local_communicator();
  TrainCore core;
  ReferenceTable table;
  bool dpo;
  Side(const ModelConfig& c, const Backend& be, const Opts& o, Kind kind)
      : core(c, be, lora_of(o), {.strategy = ShardStrategy::kNoShard, .shard = *comm},
             OptimizerSettings{}, {.dpo = dpo_of(kind)}),
        table(static_cast<size_t>(o.pairs), 0),
        dpo(kind != Kind::kSft) {
    if (kind == Kind::kDpoPrecomputed) core.use_reference_table(&table);
  }
  void load(const UnitValues& values) {
    load(core.fsdp(), values);
    if (Fsdp* ref = core.reference()) load(*ref, values);
  }
  static std::optional<LoraConfig> lora_of(const Opts& o) {
    if (o.lora == 0) return std::nullopt;
    LoraConfig l;
    l.rank = o.lora;
    l.alpha = 2.0 * o.lora;
    l.targets = resolve_lora_targets({"all-linear"}, "--lora");
    return l;
  }
  void zero() {
    for (Fsdp* f : {&core.fsdp(), core.reference()}) {
      for (int u = 0; f != nullptr && u < f->num_units(); ++u) f->zero_shard(u);
    }
  }
  static void load(Fsdp& f, const UnitValues& values) {
    const auto ranges = f.shard_ranges();
    for (int u = 0; u < f.num_units(); ++u) {
      f.zero_shard(u);
      f.load_shard(u, 0, values[u].data() + ranges[u].begin, ranges[u].size());
    }
  }
  double step_ms(const Batch& b, const Backend& be, int64_t step) {
    const auto t0 = std::chrono::steady_clock::now();
    const double denominator = static_cast<double>(dpo ? b.num_pairs() : b.num_targets());
    core.step({&b, 1}, denominator, step, 1e-5);
    be.synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::unique_ptr<Backend> backend_of(const Opts& o) {
  return make_backend(parse_named(kDeviceRequestNames, o.device, "--device"),
                      parse_named(kComputeDTypeNames, o.dtype, "--dtype"));
}

// The process's peak memory: RSS on the CPU, the backend's device peak on a GPU (MiB).
double peak_mib(const Backend& be) {
  const double bytes = be.device() == Device::kCpu ? static_cast<double>(peak_resident_bytes())
                                                   : static_cast<double>(be.memory_stats().peak);
  return bytes / 1048576.0;
}

// --row: one side, three steps, its peak memory (MiB) on stdout.
int run_row(const Opts& o, const ModelConfig& c) {
  const auto be = backend_of(o);
  Side side(c, *be, o, o.row == "dpo" ? Kind::kDpo : Kind::kSft);
  side.zero();  // the values do not change what the step holds: no random draw
  const Batch b = make_batch(o, c.vocab_size);
  for (int s = 0; s < 3; ++s) side.step_ms(b, *be, s);
  std::printf("%.1f\n", peak_mib(*be));
  return 0;
}

double child_peak_mib(const Opts& o, const std::string& row) {
  const std::string cmd = fmt::format(
      "{} bench dpo --preset {} --pairs {} --seq {} --lora {} --device {} --dtype {} --row {}",
      self_command("bench dpo"), shell_quote(o.preset), o.pairs, o.seq, o.lora,
      shell_quote(o.device), shell_quote(o.dtype), row);
  FILE* p = ::popen(cmd.c_str(), "r");
  double mib = 0;
  if (p == nullptr || std::fscanf(p, "%lf", &mib) != 1) mib = -1;
  if (p != nullptr) ::pclose(p);
  if (mib < 0) fail("bench dpo: the {} side's child process gave no figure", row);
  return mib;
}

int run(const Opts& o) {
  if (o.pairs < 1 || o.seq < 4 || o.rounds < 1 || o.lora < 0 || o.memory_rounds < 0) {
    fail(
        "bench dpo: --pairs, --rounds must be positive, --seq at least 4, --lora and "
        "--memory-rounds >= 0");
  }
  const ModelConfig c = preset_config(o.preset);
  if (!o.row.empty()) return run_row(o, c);
  const auto be = backend_of(o);
  Side sft(c, *be, o, Kind::kSft), dpo(c, *be, o, Kind::kDpo),
      pre(c, *be, o, Kind::kDpoPrecomputed);
  std::vector<Side*> sides = {&sft, &dpo, &pre};
  {
    const UnitValues values = unit_values(sft.core.model().layout());
    for (Side* s : sides) s->load(values);
  }
  const Batch b = make_batch(o, c.vocab_size);
  std::printf("bench dpo: %s, %d pairs (%d rows) x %d tokens, %s, %s %s, %s\n", o.preset.c_str(),
              o.pairs, 2 * o.pairs, o.seq,
              o.lora ? fmt::format("LoRA rank {}", o.lora).c_str() : "full fine-tuning",
              std::string(be->name()).c_str(), o.dtype.c_str(),
              be->device() == Device::kCpu ? blas_info().c_str() : "");
  std::vector<std::vector<double>> ms(sides.size());
  for (Side* s : sides) s->step_ms(b, *be, 0);  // warm-up: buffers, pools, GEMM plans
  for (int r = 0; r < o.rounds; ++r) {          // the sides alternate, each round in another order
    for (size_t k = 0; k < sides.size(); ++k) {
      const size_t i = (k + static_cast<size_t>(r)) % sides.size();
      ms[i].push_back(sides[i]->step_ms(b, *be, r + 1));
    }
  }
  const double ms_sft = median(ms[0]), ms_dpo = median(ms[1]), ms_pre = median(ms[2]);
  std::printf(
      "step ms (median of %d): sft %.3f, dpo live reference %.3f (%.3fx), dpo precomputed "
      "reference %.3f (%.3fx)\n",
      o.rounds, ms_sft, ms_dpo, ms_dpo / ms_sft, ms_pre, ms_pre / ms_sft);
  if (o.lora > 0 && o.memory_rounds > 0) {
    std::vector<double> m_sft, m_dpo;
    for (int r = 0; r < o.memory_rounds; ++r) {  // alternating, each side in a process of its own
      m_sft.push_back(child_peak_mib(o, "sft"));
      m_dpo.push_back(child_peak_mib(o, "dpo"));
    }
    std::printf("peak memory MiB (median of %d child processes): sft %.1f, dpo %.1f (%.3fx)\n",
                o.memory_rounds, median(m_sft), median(m_dpo), median(m_dpo) / median(m_sft));
  }
  return 0;
}

}  // namespace

Command add_bench_dpo(CLI::App& bench) {
  auto o = std::make_shared<Opts>();
  CLI::App* sub = bench.add_subcommand(
      "dpo", "A DPO step (live and precomputed reference) beside an SFT step on the same rows");
  sub->add_option("--preset", o->preset, "Model shape")->capture_default_str();
  sub->add_option("--pairs", o->pairs, "Pairs per step (2 rows each)")->capture_default_str();
  sub->add_option("--seq", o->seq, "Tokens per row")->capture_default_str();
  sub->add_option("--rounds", o->rounds, "Timed rounds, medians reported")->capture_default_str();
  sub->add_option("--lora", o->lora, "LoRA rank (all seven projections); 0: full fine-tuning")
      ->capture_default_str();
  sub->add_option("--memory-rounds", o->memory_rounds,
                  "With --lora: child processes per side for the peak memory (0: none)")
      ->capture_default_str();
  sub->add_option("--device", o->device, "auto, cpu or cuda (as train.device)")
      ->capture_default_str();
  sub->add_option("--dtype", o->dtype, "fp32 or bf16 (as train.dtype)")->capture_default_str();
  sub->add_option("--row", o->row, "Internal: one side's peak memory")->group("");
  return {sub, [o] { return run(*o); }};
}

}  // namespace kiln::cli
