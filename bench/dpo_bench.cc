// What a preference (DPO) step costs beside a supervised step on the same sequences, on this
// machine's CPU: a DPO step on N pairs with a live reference (its forward, then the policy's
// forward and backward through the preference head) and with a precomputed one
// (dpo.precompute_reference: a table) against an SFT step on the same 2N rows, the sides
// alternating round by round, medians printed; and, with --lora, each side's peak RSS in a
// child process of its own (the reference is then the base with the adapters off: no second
// copy). Prints figures; never judges them.
//
//   dpo_bench [--preset 25m] [--pairs 4] [--seq 256] [--rounds 7] [--lora RANK] [--threads T]
//
// Random weights and tokens; each row's first half is its prompt (no loss), the second its
// completion.
#include <fmt/format.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/base/process_memory.h"
#include "kiln/comm/communicator.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/kernels/device/host_cpu.h"
#include "kiln/model/init.h"
#include "kiln/train/reference_table.h"
#include "kiln/train/train_core.h"

namespace kiln {
namespace {

struct Opts {
  std::string preset = "25m";
  int pairs = 4, seq = 256, rounds = 7, lora = 0, threads = 0;
  std::string row;  // internal: "sft" or "dpo", one side's peak RSS in this process
};

Opts parse(int argc, char** argv) {
  Opts o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--preset")
      o.preset = v;
    else if (k == "--pairs")
      o.pairs = std::stoi(v);
    else if (k == "--seq")
      o.seq = std::stoi(v);
    else if (k == "--rounds")
      o.rounds = std::stoi(v);
    else if (k == "--lora")
      o.lora = std::stoi(v);
    else if (k == "--threads")
      o.threads = std::stoi(v);
    else if (k == "--row")
      o.row = v;
    else {
      std::fprintf(stderr, "dpo_bench: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return o;
}

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

// One side's training core, its weights (and a DPO run's reference) random from one seed; a
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
    load(core.fsdp());
    if (Fsdp* ref = core.reference()) load(*ref);
    if (kind == Kind::kDpoPrecomputed) core.use_reference_table(&table, false);
  }
  static std::optional<LoraConfig> lora_of(const Opts& o) {
    if (o.lora == 0) return std::nullopt;
    LoraConfig l;
    l.rank = o.lora;
    l.alpha = 2.0 * o.lora;
    l.targets = resolve_lora_targets({"all-linear"}, "--lora");
    return l;
  }
  void load(Fsdp& f) {
    const ParamLayout& layout = core.model().layout();
    const auto ranges = f.shard_ranges();
    for (int u = 0; u < f.num_units(); ++u) {
      std::vector<float> v(layout.units()[u].numel);
      init_unit_values(layout, u, 5, v.data());
      f.zero_shard(u);
      f.load_shard(u, 0, v.data() + ranges[u].begin, ranges[u].size());
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

// --row: one side, three steps, its peak RSS (MiB) on stdout.
int run_row(const Opts& o, const ModelConfig& c) {
  const auto be = make_backend(DeviceRequest::kCpu, ComputeDType::kFp32);
  Side side(c, *be, o, o.row == "dpo" ? Kind::kDpo : Kind::kSft);
  const Batch b = make_batch(o, c.vocab_size);
  for (int s = 0; s < 3; ++s) side.step_ms(b, *be, s);
  std::printf("%.1f\n", peak_resident_bytes() / 1048576.0);
  return 0;
}

double child_peak_mib(const char* self, const Opts& o, const std::string& row) {
  const std::string cmd =
      fmt::format("{} --preset {} --pairs {} --seq {} --lora {} --threads {} --row {}", self,
                  o.preset, o.pairs, o.seq, o.lora, o.threads, row);
  FILE* p = ::popen(cmd.c_str(), "r");
  double mib = 0;
  if (p == nullptr || std::fscanf(p, "%lf", &mib) != 1) mib = -1;
  if (p != nullptr) ::pclose(p);
  return mib;
}

int run(int argc, char** argv) {
  const Opts o = parse(argc, argv);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const ModelConfig c = preset_config(o.preset);
  if (!o.row.empty()) return run_row(o, c);
  const auto be = make_backend(DeviceRequest::kCpu, ComputeDType::kFp32);
  Side sft(c, *be, o, Kind::kSft), dpo(c, *be, o, Kind::kDpo),
      pre(c, *be, o, Kind::kDpoPrecomputed);
  const Batch b = make_batch(o, c.vocab_size);
  std::printf("dpo_bench: %s, %d pairs (%d rows) x %d tokens, %s, %d threads, %s\n",
              o.preset.c_str(), o.pairs, 2 * o.pairs, o.seq,
              o.lora ? fmt::format("LoRA rank {}", o.lora).c_str() : "full fine-tuning",
              omp_get_max_threads(), blas_info().c_str());
  std::vector<Side*> sides = {&sft, &dpo, &pre};
  std::vector<std::vector<double>> ms(sides.size());
  for (Side* s : sides) s->step_ms(b, *be, 0);  // warm-up: buffers, pools, GEMM plans
  for (int r = 0; r < o.rounds; ++r) {  // the sides alternate, each round in another order
    for (size_t k = 0; k < sides.size(); ++k) {
      const size_t i = (k + static_cast<size_t>(r)) % sides.size();
      ms[i].push_back(sides[i]->step_ms(b, *be, r + 1));
    }
  }
  const double ms_sft = median(ms[0]), ms_dpo = median(ms[1]), ms_pre = median(ms[2]);
  std::printf(
      "step ms (median of %d): sft %.1f, dpo live reference %.1f (%.3fx), dpo precomputed "
      "reference %.1f (%.3fx)\n",
      o.rounds, ms_sft, ms_dpo, ms_dpo / ms_sft, ms_pre, ms_pre / ms_sft);
  if (o.lora > 0) {
    std::vector<double> m_sft, m_dpo;
    for (int r = 0; r < 3; ++r) {
      m_sft.push_back(child_peak_mib(argv[0], o, "sft"));
      m_dpo.push_back(child_peak_mib(argv[0], o, "dpo"));
    }
    std::printf("peak RSS MiB (median of 3 child processes): sft %.1f, dpo %.1f, ratio %.3f\n",
                median(m_sft), median(m_dpo), median(m_dpo) / median(m_sft));
  }
  return 0;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) { return kiln::run(argc, argv); }
