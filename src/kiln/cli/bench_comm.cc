// kiln bench comm: collective bandwidth across the worker group, reported as nccl-tests does
// (size, count, type, time, algbw, busbw, #wrong), so figures compare with theirs directly.
// Runs through launch(): --nproc N local workers, or the ranks of torchrun/mpirun/srun, or kiln
// as the agent on several nodes.
//
// busbw (nccl-tests' definition): algbw * 2(n-1)/n for all_reduce, algbw * (n-1)/n for
// all_gather and reduce_scatter, where algbw = size / time and size is the full buffer (the
// gathered output, the scattered input). It is the per-link rate a ring would need, so it is
// comparable across group sizes and against the link's own bandwidth.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include "kiln/base/cpu_time.h"
#include "kiln/base/error.h"
#include "kiln/cli/commands.h"
#include "kiln/launch/launch.h"
#include "kiln/tensor/dtype.h"

namespace kiln::cli {

namespace {

struct CommBenchOpts {
  std::string min_bytes = "1KiB", max_bytes = "256MiB";
  int iters = 20, warmup = 5;
  std::vector<std::string> ops = {"all_reduce", "all_gather", "reduce_scatter"};
  std::string dtype = "f32";
  double expect_busbw = 0;  // GB/s; 0: no floor
  int nproc = 1;
  double timeout_s = 300;
  TopologyFlags flags;
};

// "64KiB", "256MiB", "1G", "1000000": K/KiB/M/MiB/G/GiB are powers of 1024, KB/MB/GB of 1000.
uint64_t parse_bytes(const std::string& s, const char* what) {
  size_t end = 0;
  uint64_t v = 0;
  try {
    v = std::stoull(s, &end);
  } catch (const std::exception&) {
    fail("{} '{}': expected a size such as 1KiB, 64MiB or 1048576", what, s);
  }
  static const std::map<std::string, uint64_t> kUnits = {{"", 1},
                                                         {"B", 1},
                                                         {"K", 1 << 10},
                                                         {"KiB", 1 << 10},
                                                         {"KB", 1000},
                                                         {"M", 1 << 20},
                                                         {"MiB", 1 << 20},
                                                         {"MB", 1000000},
                                                         {"G", 1ull << 30},
                                                         {"GiB", 1ull << 30},
                                                         {"GB", 1000000000ull}};
  auto it = kUnits.find(s.substr(end));
  if (it == kUnits.end())
    fail("{} '{}': unknown unit (B, K, KiB, KB, M, MiB, MB, G, GiB, GB)", what, s);
  return v * it->second;
}

std::string bytes_text(uint64_t b) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) return fmt::format("{} GiB", b >> 30);
  if (b >= (1u << 20) && b % (1u << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b >= (1u << 10) && b % (1u << 10) == 0) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}

// Element i of rank r's input: small integers, so every sum over the group is exact in f32,
// bf16 and f16 and the check compares bit for bit. (m-1) * world <= 256 keeps bf16 exact.
struct Pattern {
  int world, m;
  explicit Pattern(int w) : world(w), m(std::clamp(256 / std::max(w, 1) + 1, 1, 4)) {}
  float at(int rank, size_t i) const { return static_cast<float>((i + rank) % m); }
  float sum(size_t i) const {
    float s = 0;
    for (int r = 0; r < world; ++r) s += at(r, i);
    return s;
  }
};

// A byte buffer holding f32 or 16-bit elements.
struct Elems {
  DType t;
  std::vector<uint32_t> raw;
  Elems(DType type, size_t n) : t(type), raw((n * dtype_size(type) + 3) / 4) {}
  void* data() { return raw.data(); }
  void set(size_t i, float v) {
    if (t == DType::F32) {
      reinterpret_cast<float*>(raw.data())[i] = v;
    } else {
      reinterpret_cast<uint16_t*>(raw.data())[i] =
          t == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
    }
  }
  float get(size_t i) const {
    if (t == DType::F32) return reinterpret_cast<const float*>(raw.data())[i];
    const uint16_t h = reinterpret_cast<const uint16_t*>(raw.data())[i];
    return t == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
  void zero() { std::fill(raw.begin(), raw.end(), 0u); }
};

struct Row {
  uint64_t bytes = 0, count = 0;
  double seconds = 0, algbw = 0, busbw = 0;
  int64_t wrong = 0;
};

// One op at one size on this rank: `count` is the full buffer's elements (world * per-rank for
// all_gather and reduce_scatter). Every rank returns the same row: times are the slowest
// rank's per iteration, wrong elements are summed over the group.
Row run_size(Communicator& comm, const std::string& op, DType t, size_t count,
             const CommBenchOpts& o) {
  const int n = comm.world_size(), rank = comm.rank();
  const size_t per_rank = op == "all_reduce" ? count : count / n;
  const Pattern pat(n);
  Elems a(t, count), b(t, op == "all_reduce" ? 0 : per_rank);
  auto issue = [&]() -> std::unique_ptr<Work> {
    if (op == "all_reduce")
      return comm.all_reduce_async(a.data(), count, t, ReduceOp::kSum, nullptr);
    if (op == "all_gather") return comm.all_gather_async(a.data(), b.data(), per_rank, t, nullptr);
    return comm.reduce_scatter_async(b.data(), a.data(), per_rank, t, ReduceOp::kSum, nullptr);
  };
  // The data check, once, before timing.
  if (op == "all_gather") {
    for (size_t i = 0; i < per_rank; ++i) b.set(i, pat.at(rank, i));
  } else {
    for (size_t i = 0; i < count; ++i) a.set(i, pat.at(rank, i));
  }
  issue()->wait_host();
  double wrong = 0;
  if (op == "all_reduce") {
    for (size_t i = 0; i < count; ++i) wrong += a.get(i) != pat.sum(i);
  } else if (op == "all_gather") {
    for (size_t i = 0; i < count; ++i)
      wrong += a.get(i) != pat.at(static_cast<int>(i / per_rank), i % per_rank);
  } else {
    for (size_t i = 0; i < per_rank; ++i) wrong += b.get(i) != pat.sum(rank * per_rank + i);
  }
  comm.all_reduce(&wrong, 1, ReduceOp::kSum);
  // Timed on zeros: repeated in-place sums of the pattern would grow without bound.
  a.zero();
  b.zero();
  std::vector<double> times;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    issue()->wait_host();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (it >= o.warmup) times.push_back(dt);
  }
  comm.all_reduce(times.data(), times.size(), ReduceOp::kMax);
  std::sort(times.begin(), times.end());
  Row row;
  row.count = count;
  row.bytes = count * dtype_size(t);
  row.seconds = times[times.size() / 2];
  row.algbw = static_cast<double>(row.bytes) / row.seconds / 1e9;
  const double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
  row.busbw = row.algbw * factor;
  row.wrong = static_cast<int64_t>(wrong);
  return row;
}

int run_bench(WorkerContext& ctx, const CommBenchOpts& o) {
  Communicator& comm = ctx.comm();
  const WorkerIdentity& id = ctx.identity();
  const bool lead = id.rank == 0;
  const DType t = *dtype_from_cli(o.dtype);
  const uint64_t lo = parse_bytes(o.min_bytes, "--min-bytes");
  const uint64_t hi = parse_bytes(o.max_bytes, "--max-bytes");
  const int n = id.world_size;
  const double busy0 = machine_busy_seconds(), self0 = own_cpu_seconds();
  const auto t_start = std::chrono::steady_clock::now();
  if (lead) {
    std::printf(
        "# kiln bench comm: %d rank(s) over %s, %s, median of %d iterations after %d "
        "warm-up (slowest rank per iteration)\n",
        n, comm.transport().c_str(), o.dtype.c_str(), o.iters, o.warmup);
    std::printf(
        "# busbw = algbw * 2(n-1)/n (all_reduce), algbw * (n-1)/n (all_gather, "
        "reduce_scatter); size is the full buffer\n");
  }
  std::vector<std::string> failures;
  std::vector<std::pair<std::string, Row>> largest;
  for (const auto& op : o.ops) {
    if (lead) {
      std::printf("#\n# %s%s\n# %12s %12s %6s %12s %10s %10s %8s\n", op.c_str(),
                  op == "all_gather" ? "" : " (sum)", "size(B)", "count", "type", "time(us)",
                  "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    }
    Row last;
    for (uint64_t s = lo; s <= hi; s *= 2) {
      // Whole elements, and for the sharded ops a multiple of the group size.
      const uint64_t unit = dtype_size(t) * (op == "all_reduce" ? 1 : n);
      const size_t count = static_cast<size_t>(s / unit) * (op == "all_reduce" ? 1 : n);
      if (count == 0) continue;
      const Row row = run_size(comm, op, t, count, o);
      if (lead) {
        std::printf("  %12llu %12llu %6s %12.1f %11.3f %11.3f %8lld\n",
                    static_cast<unsigned long long>(row.bytes),
                    static_cast<unsigned long long>(row.count), o.dtype.c_str(), row.seconds * 1e6,
                    row.algbw, row.busbw, static_cast<long long>(row.wrong));
        std::fflush(stdout);
      }
      if (row.wrong != 0) {
        failures.push_back(
            fmt::format("{} at {}: {} wrong element(s)", op, bytes_text(row.bytes), row.wrong));
      }
      last = row;
      if (s > hi / 2) break;  // no overflow past the largest size
    }
    if (last.bytes == 0) continue;
    largest.emplace_back(op, last);
    if (o.expect_busbw > 0 && last.busbw < o.expect_busbw) {
      failures.push_back(fmt::format("{} busbw {:.3f} GB/s at {} is below --expect-busbw {}", op,
                                     last.busbw, bytes_text(last.bytes), o.expect_busbw));
    }
  }
  // What other processes took meanwhile (this node's ranks' own CPU time subtracted), so a
  // figure from a busy shared machine is visible as such.
  double self = own_cpu_seconds() - self0;
  if (id.num_nodes == 1) comm.all_reduce(&self, 1, ReduceOp::kSum);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (lead) {
    std::printf("#\n# largest size busbw (GB/s):");
    for (const auto& [op, row] : largest) std::printf(" %s %.3f", op.c_str(), row.busbw);
    std::printf("\n");
    if (id.num_nodes == 1) {
      std::printf("# other processes used %.1f CPU-seconds during the %.1f s run\n",
                  std::max(0.0, machine_busy_seconds() - busy0 - self), wall);
    }
    if (!failures.empty()) {
      std::fflush(stdout);
      std::fprintf(stderr, "kiln: error: bench comm: %s\n", failures.front().c_str());
    }
  }
  return failures.empty() ? 0 : 1;
}

}  // namespace

Command add_bench_comm(CLI::App& bench) {
  auto o = std::make_shared<CommBenchOpts>();
  CLI::App* sub = bench.add_subcommand(
      "comm", "Collective bandwidth across the worker group (nccl-tests style: algbw, busbw)");
  sub->add_option("--min-bytes", o->min_bytes, "Smallest message (doubling up to --max-bytes)")
      ->capture_default_str();
  sub->add_option("--max-bytes", o->max_bytes, "Largest message")->capture_default_str();
  sub->add_option("--iters", o->iters, "Timed iterations per size (median reported)")
      ->capture_default_str();
  sub->add_option("--warmup", o->warmup, "Untimed iterations per size")->capture_default_str();
  sub->add_option("--ops", o->ops, "Collectives, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"all_reduce", "all_gather", "reduce_scatter"}))
      ->capture_default_str();
  sub->add_option("--dtype", o->dtype, "Element type")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  sub->add_option("--expect-busbw", o->expect_busbw,
                  "Fail when the largest size's busbw (GB/s) of any op is below this");
  sub->add_option("--nproc", o->nproc, "Workers on this machine")->capture_default_str();
  sub->add_option("--timeout", o->timeout_s, "Seconds any collective may take")
      ->capture_default_str();
  sub->add_option("--nnodes", o->flags.nnodes, "Number of nodes (kiln runs as the agent on each)");
  sub->add_option("--node-rank", o->flags.node_rank, "This node's rank");
  sub->add_option("--master-addr", o->flags.master_addr, "Address of node 0 (hosts the store)");
  sub->add_option("--master-port", o->flags.master_port, "Port of the store on node 0");
  sub->footer(
      "Rank 0 prints one table per collective. Exits non-zero when any element is wrong or "
      "--expect-busbw is not met. Under torchrun/mpirun/srun every rank runs it directly.");
  return {sub, [o] {
            if (o->iters < 1 || o->warmup < 0 || o->nproc < 1) {
              fail("bench comm: --iters >= 1, --warmup >= 0, --nproc >= 1");
            }
            const uint64_t lo = parse_bytes(o->min_bytes, "--min-bytes");
            const uint64_t hi = parse_bytes(o->max_bytes, "--max-bytes");
            if (lo == 0 || lo > hi) fail("bench comm: need 0 < --min-bytes <= --max-bytes");
            LaunchOptions lo_opts;
            lo_opts.flags = o->flags;
            lo_opts.nproc_per_node = o->nproc;
            lo_opts.timeout_s = o->timeout_s;
            std::string ops;
            for (const auto& op : o->ops) ops += (ops.empty() ? "" : ",") + op;
            lo_opts.worker_args = {"bench",       "comm",
                                   "--min-bytes", o->min_bytes,
                                   "--max-bytes", o->max_bytes,
                                   "--iters",     std::to_string(o->iters),
                                   "--warmup",    std::to_string(o->warmup),
                                   "--ops",       ops,
                                   "--dtype",     o->dtype,
                                   "--timeout",   fmt::format("{}", o->timeout_s)};
            if (o->expect_busbw > 0) {
              lo_opts.worker_args.push_back("--expect-busbw");
              lo_opts.worker_args.push_back(fmt::format("{}", o->expect_busbw));
            }
            return launch(lo_opts, [o](WorkerContext& ctx) { return run_bench(ctx, *o); });
          }};
}

}  // namespace kiln::cli
