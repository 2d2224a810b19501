#include "kiln/train/memory_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/comm/shm_lane.h"
#include "kiln/fsdp/fsdp_pool_plan.h"
#include "kiln/kernels/ops.h"
#include "kiln/model/layout.h"

namespace kiln {

namespace {

constexpr size_t kF32 = 4;

size_t aligned64(size_t bytes) { return (bytes + 63) / 64 * 64; }
size_t bf16_floats(size_t n) { return (n * 2 + 3) / 4; }  // storage_floats(n, BF16)
double mib(size_t b) { return static_cast<double>(b) / 1048576.0; }

// One unit as FSDP holds it: n floats padded to a multiple of the shard group.
struct UnitGeometry {
  std::string name;
  size_t numel = 0, padded = 0, shard = 0;
};

std::vector<UnitGeometry> unit_geometry(const ModelConfig& c, size_t S) {
  std::vector<UnitGeometry> out;
  const ParamLayout layout(c);
  for (const auto& u : layout.units()) {
    const size_t padded = (u.numel + S - 1) / S * S;
    out.push_back({u.name, u.numel, padded, padded / S});
  }
  return out;
}

// The fused cross-entropy's chunk of logits plus its gathered rows and their gradient; under
// bf16 the rows and the chunk's gradient are also kept rounded for the products.
size_t cross_entropy_bytes(const ModelConfig& c, size_t tokens, bool bf16) {
  const size_t rows = ce_chunk_rows(tokens, c.vocab_size);
  const size_t floats = rows * (c.vocab_size + 2 * c.hidden_size);
  const size_t rounded = bf16 ? rows * (c.vocab_size + c.hidden_size) * 2 : 0;
  return floats * kF32 + rounded;
}

// Gloo's ring reduce-scatter keeps partial sums of min(2, S - 1) shards in scratch it reuses,
// grown to the largest shard (gloo_collectives.cc).
size_t gloo_scratch_bytes(const std::vector<UnitGeometry>& units, const MemorySettings& s) {
  if (s.gloo && s.shm_lane) return ShmLane::segment_bytes(s.world_size);
  if (!s.gloo || s.strategy == ShardStrategy::kNoShard || s.shard_size < 2) return 0;
  size_t largest = 0;
  for (const auto& u : units) largest = std::max(largest, u.shard);
  const size_t bufs = std::min<size_t>(2, static_cast<size_t>(s.shard_size) - 1);
  return bufs * largest * (s.reduce_bf16 ? 2 : kF32);
}

// Memory the CPU kernels' libraries keep beyond kiln's own buffers, measured on the benchmark
// shapes (bench/memory_plan_bench.sh): the GEMM library packs the LM head's chunk of (rows,
// cols) logit gradients for dW as large again as the chunk, and the first step touches thread
// stacks and library pages (8 MiB).
size_t cpu_library_bytes(size_t rows, size_t cols) {
  return rows * cols * kF32 + (size_t{8} << 20);
}

// The fused cross-entropy's chunk and, on the CPU, the library's packing of its gradient. An
// LM head whose vocabulary FSDP splits keeps its logits in FSDP's pool instead (the comm part);
// the library then packs that chunk, and an evaluation (forward only) still runs the fused
// cross-entropy over the whole table.
size_t workspace_bytes(const ModelConfig& c, const std::vector<UnitGeometry>& units,
                       const MemorySettings& s, size_t S, size_t tokens) {
  const size_t C = c.hidden_size, V = c.vocab_size;
  const UnitGeometry& table = units[ParamLayout(c).lm_head_unit()];
  if (!splits_vocabulary(s.strategy, S, table.shard, table.numel, tokens, C)) {
    return cross_entropy_bytes(c, tokens, s.bf16) +
           (s.on_cpu ? cpu_library_bytes(ce_chunk_rows(tokens, V), V) : 0);
  }
  const size_t rows = vocab_head_logit_rows(S * tokens, table.shard, C);
  const size_t library = s.on_cpu ? cpu_library_bytes(rows, table.shard / C) : 0;
  const size_t eval = s.eval ? cross_entropy_bytes(c, tokens, s.bf16) : 0;
  return std::max(library, eval);
}

// The final save: every rank writes its shard one tensor at a time through a buffer of the
// largest; then rank 0 assembles final/ one whole unit at a time (f32).
size_t final_save_bytes(const std::vector<UnitGeometry>& units, bool writes_final) {
  size_t largest_unit = 0, largest_part = 0;
  for (const auto& u : units) {
    largest_unit = std::max(largest_unit, u.numel);
    largest_part = std::max(largest_part, std::min(u.numel, u.shard));
  }
  return (writes_final ? std::max(largest_unit, largest_part) : largest_part) * kF32;
}

// FSDP's pool for these settings (fsdp/fsdp_pool_plan.h).
FsdpPoolPlan pool_plan(const ModelConfig& c, const std::vector<UnitGeometry>& units,
                       const MemorySettings& s, size_t S) {
  FsdpPoolSettings ps;
  for (const auto& u : units) ps.unit_numel.push_back(u.numel);
  ps.tied = c.tie_word_embeddings;
  ps.strategy = s.strategy;
  ps.shard_size = S;
  ps.gather = s.bf16 ? DType::BF16 : DType::F32;
  ps.reduce = s.reduce_bf16 ? DType::BF16 : DType::F32;
  ps.prefetch = s.prefetch;
  ps.tokens = static_cast<size_t>(s.micro_batch) * static_cast<size_t>(s.seq_len);
  ps.hidden = c.hidden_size;
  ps.group_size = s.strategy == ShardStrategy::kNoShard ? static_cast<size_t>(s.world_size) : S;
  return plan_fsdp_pool(ps);
}

}  // namespace

size_t activation_arena_bytes(const ModelConfig& c, size_t N, bool recompute, bool bf16) {
  const size_t L = c.num_hidden_layers, C = c.hidden_size, I = c.intermediate_size;
  const size_t Q = c.q_dim(), KV = c.kv_dim(), H = c.num_attention_heads;
  const size_t act = bf16 ? 2 : 4;  // xn1, xn2, h: only feed products
  auto f = [](size_t n) { return aligned64(n * kF32); };
  auto a = [&](size_t n) { return aligned64(n * act); };
  // Decoder::plan_buffers, piece by piece (MemoryPlan.ActivationsAreTheModelsArena holds the
  // two equal): per layer xn1, rstd1, q, k, v, y, lse, xmid, xn2, rstd2, gate_up, h; the shared
  // q/k/v product; the backward's dxf, dres, dxn, dq, dk, dv, dy, dgate_up, dh.
  // With q/k norms each layer also keeps q_pre, k_pre, rstd_q, rstd_k and backward d(k_pre).
  const size_t qk = c.qk_norm ? 1 : 0, KVH = c.num_key_value_heads;
  const size_t layer = a(N * C) + f(N) + f(N * Q) + 2 * f(N * KV) + f(N * Q) + f(N * H) + f(N * C) +
                       a(N * C) + f(N) + f(2 * N * I) + a(N * I) +
                       qk * (f(N * Q) + f(N * KV) + f(N * H) + f(N * KVH));
  const size_t qkv = f(N * (Q + 2 * KV));
  const size_t grads =
      3 * f(N * C) + f(N * Q) + 2 * f(N * KV) + f(N * Q) + f(2 * N * I) + f(N * I) + qk * f(N * KV);
  return f((L + 1) * N * C) + (recompute ? 1 : L) * layer + qkv + f(N * C) + f(N) + grads +
         f(4 * N);
}

MemoryPlan plan_memory(const ModelConfig& c, const MemorySettings& s) {
  KILN_CHECK(s.world_size >= 1 && s.shard_size >= 1 && s.micro_batch >= 1 && s.seq_len >= 1,
             "memory plan: sizes must be positive");
  const bool no_shard = s.strategy == ShardStrategy::kNoShard;
  const size_t S = no_shard ? 1 : static_cast<size_t>(s.shard_size);
  const auto units = unit_geometry(c, S);
  MemoryPlan p;
  size_t numel_mine = 0;
  for (const auto& u : units) {
    p.params += u.shard * kF32;
    numel_mine += std::min(u.numel, u.shard);  // rank 0's part: the optimizer's ranges
    const size_t g = (s.bf16 ? bf16_floats(u.padded) : u.padded) * kF32;
    if (g > p.largest_gathered) p.largest_gathered = g, p.largest_unit = u.name;
  }
  p.grads = p.params;
  p.optimizer = numel_mine * kF32 * static_cast<size_t>(s.optimizer_states);
  const FsdpPoolPlan pool = pool_plan(c, units, s, S);
  p.gathered = pool.gathered;
  p.grad_buffers = pool.grads;
  p.comm = pool.comm;
  p.comm_scratch = gloo_scratch_bytes(units, s);
  const size_t N = static_cast<size_t>(s.micro_batch) * static_cast<size_t>(s.seq_len);
  p.activations_full = activation_arena_bytes(c, N, false, s.bf16);
  p.activations_recompute = activation_arena_bytes(c, N, true, s.bf16);
  p.activations = s.recompute ? p.activations_recompute : p.activations_full;
  p.workspace = workspace_bytes(c, units, s, S, N);
  if (s.background_save) p.snapshot = numel_mine * kF32 * (1 + s.optimizer_states);
  p.final_save = final_save_bytes(units, s.writes_final);
  p.baseline = s.baseline;
  const size_t state = p.params + p.grads + p.optimizer;
  const size_t pool_bytes = p.gathered + p.grad_buffers + p.comm;
  p.device_peak = state + pool_bytes + p.comm_scratch + p.activations + p.workspace;
  // The final save runs after Fsdp::release_buffers(): its unit replaces the pool, not adds.
  const size_t host_tail = std::max(pool_bytes, p.final_save) - pool_bytes;
  p.peak = s.on_cpu ? p.baseline + p.device_peak + p.snapshot + host_tail : p.device_peak;
  return p;
}

MemorySettings memory_settings(const Recipe& r, int world_size, int per_node, bool on_cpu) {
  MemorySettings s;
  s.world_size = world_size;
  s.strategy = world_size == 1 ? ShardStrategy::kNoShard : parse_strategy(r.dist.strategy);
  s.shard_size = s.strategy == ShardStrategy::kHybridShard ? per_node
                 : s.strategy == ShardStrategy::kNoShard   ? 1
                                                           : world_size;
  s.bf16 = r.train.dtype == "bf16";
  s.reduce_bf16 = r.dist.reduce_dtype == "bf16" && world_size > 1;
  s.prefetch = r.dist.prefetch;
  s.micro_batch = r.train.micro_batch_size;
  s.seq_len = r.data.seq_len;
  s.recompute = r.train.activation_checkpointing;
  s.optimizer_states = r.optimizer.name == "adamw" ? 2 : r.optimizer.momentum > 0 ? 1 : 0;
  s.background_save = r.checkpoint.every_steps > 0 && r.checkpoint.background;
  s.writes_final = true;
  s.on_cpu = on_cpu;
  s.gloo = on_cpu || r.dist.communicator == "gloo";
  s.shm_lane = s.gloo && world_size > 1 && per_node == world_size;
  s.eval = !r.data.eval.empty() || r.data.eval_split > 0;
  return s;
}

Json MemoryPlan::to_json() const {
  return Json{{"peak_bytes", peak},
              {"device_peak_bytes", device_peak},
              {"params_bytes", params},
              {"grads_bytes", grads},
              {"optimizer_bytes", optimizer},
              {"gathered_bytes", gathered},
              {"largest_gathered_unit", largest_unit},
              {"largest_gathered_bytes", largest_gathered},
              {"grad_buffer_bytes", grad_buffers},
              {"comm_bytes", comm},
              {"comm_scratch_bytes", comm_scratch},
              {"activations_bytes", activations},
              {"activations_full_bytes", activations_full},
              {"activations_recompute_bytes", activations_recompute},
              {"workspace_bytes", workspace},
              {"snapshot_bytes", snapshot},
              {"final_save_bytes", final_save},
              {"baseline_bytes", baseline}};
}

std::string MemoryPlan::summary() const {
  return fmt::format(
      "params {:.0f} MiB, grads {:.0f}, optimizer {:.0f}; gathered units {:.0f} (largest {} "
      "{:.0f}), gradient buffers {:.0f}, comm {:.0f} (+ scratch {:.0f}); activations {:.0f} "
      "(recompute off {:.0f} / "
      "on {:.0f}), workspace {:.0f}; snapshot {:.0f}, final save {:.0f}, process {:.0f}; "
      "predicted peak {:.0f} MiB",
      mib(params), mib(grads), mib(optimizer), mib(gathered), largest_unit, mib(largest_gathered),
      mib(grad_buffers), mib(comm), mib(comm_scratch), mib(activations), mib(activations_full),
      mib(activations_recompute), mib(workspace), mib(snapshot), mib(final_save), mib(baseline),
      mib(peak));
}

size_t parse_memory_size(const std::string& text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  const std::string num = text.substr(0, i), unit = text.substr(i);
  double v = 0;
  try {
    size_t used = 0;
    v = num.empty() ? -1 : std::stod(num, &used);
    if (used != num.size()) v = -1;
  } catch (const std::exception&) {
    v = -1;
  }
  static const std::vector<std::pair<std::string, double>> units = {{"", 1},
                                                                    {"B", 1},
                                                                    {"KB", 1e3},
                                                                    {"MB", 1e6},
                                                                    {"GB", 1e9},
                                                                    {"TB", 1e12},
                                                                    {"KiB", 1024.0},
                                                                    {"MiB", 1048576.0},
                                                                    {"GiB", 1073741824.0},
                                                                    {"TiB", 1099511627776.0}};
  auto it =
      std::find_if(units.begin(), units.end(), [&](const auto& u) { return u.first == unit; });
  if (v <= 0 || !std::isfinite(v) || it == units.end()) {
    fail("{}: '{}' is not a memory size (a positive number with B, KB, MB, GB, KiB, MiB, GiB, ...)",
         what, text);
  }
  return static_cast<size_t>(v * it->second);
}

}  // namespace kiln
