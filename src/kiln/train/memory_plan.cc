#include "kiln/train/memory_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/comm/null_communicator.h"
#include "kiln/data/batch.h"
#include "kiln/kernels/device/counting_backend.h"
#include "kiln/kernels/device/device_buffer.h"
#include "kiln/kernels/device/host_cpu.h"
#include "kiln/model/decoder.h"
#include "kiln/model_files/hf_checkpoint.h"
#include "kiln/model_files/model_output.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/run_shape.h"

namespace kiln {

namespace {

double mib(size_t b) { return static_cast<double>(b) / 1048576.0; }

// A packed micro-batch of the planned shape: every token has a target (the most the loss
// computes).
Batch planned_batch(const MemorySettings& s) {
  Batch b;
  b.resize(s.micro_batch, s.seq_len);
  for (size_t i = 0; i < b.targets.size(); ++i) {
    b.positions[i] = static_cast<int32_t>(i % static_cast<size_t>(s.seq_len));
    b.targets[i] = 0;
  }
  return b;
}

// The NCCL communicators a GPU rank runs collectives on: the world, and under hybrid_shard also
// its node's and its cross-node group. None on the CPU or through Gloo.
std::vector<int> nccl_group_sizes(const MemorySettings& s) {
  if (s.on_cpu || s.gloo || s.world_size == 1) return {};
  if (s.strategy != ShardStrategy::kHybridShard) return {s.world_size};
  return {s.world_size, s.shard_size, s.world_size / s.shard_size};
}

CommScratch comm_scratch_kind(const MemorySettings& s) {
  if (!s.gloo) return CommScratch::kNone;
  return s.shm_lane ? CommScratch::kShmLane : CommScratch::kGloo;
}

// Rank 0 of the run, on a counting backend and communicators that move nothing: the
// trainer's TrainCore (train_core.h), stepped over the planned micro-batches.
class PlanRun {
 public:
  PlanRun(const ModelConfig& c, const MemorySettings& s)
      : s_(s),
        be_(s.on_cpu ? Device::kCpu : Device::kCuda,
            s.bf16 ? ComputeDType::kBf16 : ComputeDType::kFp32, s.cpu_threads),
        world_(make_null_communicator(0, s.world_size, comm_scratch_kind(s), sink())),
        intra_(hybrid() ? make_null_communicator(0, s.shard_size, comm_scratch_kind(s), sink())
                        : nullptr),
        inter_(hybrid() ? make_null_communicator(0, s.world_size / s.shard_size, CommScratch::kNone,
                                                 sink())
                        : nullptr),
        core_(c, be_, s.lora, shard_setup(), s.optimizer, s.step),
        batches_(static_cast<size_t>(s.grad_accum), planned_batch(s)) {}

  // The trainer's step: every token of every micro-batch is a target (of a preference run,
  // every pair counts).
  void train_step(int64_t step) {
    double denominator = 0;
    for (const Batch& b : batches_) {
      denominator += static_cast<double>(s_.step.dpo ? b.num_pairs() : b.num_targets());
    }
    core_.step(batches_, denominator, step, /*lr=*/1e-5);
  }
  // Trainer::evaluate: forward only.
  void evaluate() { core_.evaluate(batches_[0]); }
  // Host memory the saves hold (checkpoint.h, hf_checkpoint.h): a background save's snapshot,
  // kept; the final save's stage, then rank 0's unit of final/ (after Fsdp::release_buffers).
  size_t snapshot() {
    const size_t bytes =
        checkpoint_snapshot_floats(checkpoint_ranges(fsdp()), optimizer()) * sizeof(float);
    be_.host_allocated(&snapshot_key_, bytes);
    return bytes;
  }
  size_t final_save() {
    core_.fsdp().release_buffers();
    const size_t stage = checkpoint_stage_floats(checkpoint_ranges(fsdp())) * sizeof(float);
    be_.host_allocated(&final_key_, stage);
    be_.host_freed(&final_key_);
    const size_t unit =
        s_.writes_final ? model_output_host_floats(core_.model().layout()) * sizeof(float) : 0;
    be_.host_allocated(&final_key_, unit);
    be_.host_freed(&final_key_);
    return std::max(stage, unit);
  }

  const CountingBackend& backend() const { return be_; }
  Decoder& model() { return core_.model(); }
  const Fsdp& fsdp() const { return core_.fsdp(); }
  Fsdp* reference() { return core_.reference(); }
  const Optimizer& optimizer() const { return core_.optimizer(); }
  size_t comm_scratch() const {
    size_t n = 0;
    for (const auto& [key, bytes] : comm_held_) n += bytes;
    return n;
  }

 private:
  bool hybrid() const { return s_.strategy == ShardStrategy::kHybridShard; }
  ShardSetup shard_setup() {
    return {.strategy = s_.strategy,
            .shard = hybrid() ? *intra_ : *world_,
            .replica = inter_.get(),
            .prefetch = s_.prefetch,
            .reduce_dtype = s_.reduce_bf16 ? DType::BF16 : DType::F32};
  }
  // The communicators' own memory: host memory beside the backend's.
  ScratchSink sink() {
    return [this](const void* key, size_t bytes) {
      comm_held_[key] = bytes;
      be_.host_allocated(key, bytes);
    };
  }

  const MemorySettings& s_;
  std::map<const void*, size_t> comm_held_;
  CountingBackend be_;
  std::unique_ptr<Communicator> world_, intra_, inter_;
  TrainCore core_;
  std::vector<Batch> batches_;  // train.grad_accum_steps planned micro-batches
  int snapshot_key_ = 0, final_key_ = 0;
};

// The model's arena under the other recomputation setting, from a second counting run of one
// micro-batch over whole units.
size_t other_arena_bytes(const ModelConfig& c, const MemorySettings& s) {
  CountingBackend be(s.on_cpu ? Device::kCpu : Device::kCuda,
                     s.bf16 ? ComputeDType::kBf16 : ComputeDType::kFp32, s.cpu_threads);
  Decoder model(c, be, s.lora);
  ParamStore store(model.layout(), be);
  DeviceBuffer<double> loss(be, 1);
  model.forward_backward(planned_batch(s), store, 1.0f, !s.step.recompute, loss.data());
  return model.activation_bytes();
}

// What a preference run holds for its reference (MemoryPlan::reference).
std::string preference_reference(const MemorySettings& s) {
  if (!s.step.dpo) return "";
  if (!s.step.dpo->uses_reference()) return "none (simpo)";
  if (s.step.dpo->precomputed()) {
    return "precomputed before step 1 (reference_logps.bin, 32 bytes a pair; its model held "
           "only for that pass)";
  }
  if (s.lora) return "the base with the adapters off (no copy)";
  return "a frozen copy of the model (its shards and gathered units)";
}

}  // namespace

MemoryPlan plan_memory(const ModelConfig& c, const MemorySettings& s) {
  KILN_CHECK(s.world_size >= 1 && s.shard_size >= 1 && s.micro_batch >= 1 && s.seq_len >= 1 &&
                 s.grad_accum >= 1,
             "memory plan: sizes must be positive");
  PlanRun run(c, s);
  const Fsdp& fsdp = run.fsdp();
  const CountingBackend& be = run.backend();
  MemoryPlan p;
  p.params = fsdp.param_shard_bytes();
  p.grads = fsdp.grad_shard_bytes();
  for (int u = 0; u < fsdp.num_units(); ++u) {
    p.optimizer += run.optimizer().m(u).bytes() + run.optimizer().v(u).bytes();
    if (fsdp.gathered_bytes(u) > p.largest_gathered) {
      p.largest_gathered = fsdp.gathered_bytes(u);
      p.largest_unit = run.model().layout().units()[u].name;
    }
  }
  for (int step = 0; step < 2; ++step) run.train_step(step);
  p.activations = run.model().activation_bytes();
  if (s.eval) run.evaluate();
  if (s.background_save) p.snapshot = run.snapshot();
  const PoolParts pool = fsdp.pool_parts();
  p.reference = preference_reference(s);
  if (const Fsdp* ref = run.reference()) {
    p.reference_bytes = ref->param_shard_bytes() + ref->pool_parts().total();
  }
  p.gathered = pool.gathered;
  p.grad_buffers = pool.grads;
  p.comm = pool.comm;
  p.comm_scratch = run.comm_scratch();
  p.workspace = be.scratch_bytes();
  const size_t training_peak = s.on_cpu ? be.resident_peak() : be.memory_stats().peak;
  p.final_save = run.final_save();
  (s.step.recompute ? p.activations_recompute : p.activations_full) = p.activations;
  (s.step.recompute ? p.activations_full : p.activations_recompute) = other_arena_bytes(c, s);
  p.baseline = s.baseline;
  p.device_peak = be.memory_stats().peak;
  // Host memory (the snapshot, the communicators' scratch) is part of the peak on the CPU only.
  const size_t named = p.params + p.grads + p.optimizer + pool.total() + p.reference_bytes +
                       p.activations + p.workspace + (s.on_cpu ? p.snapshot + p.comm_scratch : 0);
  p.other = training_peak > named ? training_peak - named : 0;
  if (!s.on_cpu) {
    const EnvLookup env = [](const char* name) { return std::getenv(name); };
    p.cuda_context = cuda_context_memory(env);
    const std::vector<int> groups = nccl_group_sizes(s);
    if (!groups.empty()) p.nccl_buffers = nccl_buffer_memory(groups, env);
  }
  p.peak = s.on_cpu ? p.baseline + be.resident_peak()
                    : p.device_peak + p.cuda_context.bytes + p.nccl_buffers.bytes;
  return p;
}

MemorySettings memory_settings(const Recipe& r, int world_size, int per_node, bool on_cpu) {
  MemorySettings s;
  s.world_size = world_size;
  const RunShape shape = run_shape(r, world_size, per_node);
  s.strategy = shape.strategy;
  s.shard_size = shape.shard_size;
  s.bf16 = r.train.dtype == ComputeDType::kBf16;
  s.reduce_bf16 = shape.reduce_dtype == DType::BF16;
  s.prefetch = r.dist.prefetch;
  s.micro_batch = r.train.micro_batch_size;
  s.seq_len = r.data.seq_len;
  s.grad_accum = r.train.grad_accum_steps;
  s.step = step_settings(r, /*rank=*/0);
  s.optimizer = optimizer_settings(r);
  s.background_save = r.checkpoint.every_steps > 0 && r.checkpoint.background;
  s.writes_final = true;
  s.on_cpu = on_cpu;
  s.cpu_threads = worker_threads(r.dist.threads_per_worker, per_node);
  s.gloo = on_cpu || r.dist.communicator == CommRequest::kGloo;
  s.shm_lane = s.gloo && world_size > 1 && per_node == world_size;
  s.eval = !r.data.eval.empty() || r.data.eval_split > 0;
  s.lora = r.lora;
  return s;
}

Json MemoryPlan::to_json() const {
  Json j{{"peak_bytes", peak},
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
         {"other_bytes", other},
         {"baseline_bytes", baseline}};
  if (!reference.empty()) {
    j["reference"] = reference;
    j["reference_bytes"] = reference_bytes;
  }
  // A GPU plan's parts beside kiln's allocations, each with its source.
  if (!cuda_context.source.empty()) {
    j["cuda_context_bytes"] = cuda_context.bytes;
    j["cuda_context_source"] = cuda_context.source;
  }
  if (!nccl_buffers.source.empty()) {
    j["nccl_buffers_bytes"] = nccl_buffers.bytes;
    j["nccl_buffers_source"] = nccl_buffers.source;
  }
  return j;
}

std::string MemoryPlan::summary() const {
  std::string gpu;
  if (!cuda_context.source.empty())
    gpu += fmt::format(", CUDA context {:.0f}", mib(cuda_context.bytes));
  if (!nccl_buffers.source.empty())
    gpu += fmt::format(", NCCL buffers {:.0f}", mib(nccl_buffers.bytes));
  if (!reference.empty())
    gpu += fmt::format("; dpo reference: {}, {:.0f}", reference, mib(reference_bytes));
  return fmt::format(
      "params {:.0f} MiB, grads {:.0f}, optimizer {:.0f}; gathered units {:.0f} (largest {} "
      "{:.0f}), gradient buffers {:.0f}, comm {:.0f} (+ scratch {:.0f}); activations {:.0f} "
      "(recompute off {:.0f} / "
      "on {:.0f}), workspace {:.0f}; snapshot {:.0f}, final save {:.0f}, other {:.0f}, process "
      "{:.0f}{}; predicted peak {:.0f} MiB",
      mib(params), mib(grads), mib(optimizer), mib(gathered), largest_unit, mib(largest_gathered),
      mib(grad_buffers), mib(comm), mib(comm_scratch), mib(activations), mib(activations_full),
      mib(activations_recompute), mib(workspace), mib(snapshot), mib(final_save), mib(other),
      mib(baseline), gpu, mib(peak));
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
  // 2^64 bytes and more would wrap around in the conversion (16 EiB: no machine has it).
  const double bytes = v * it->second;
  if (bytes >= 18446744073709551616.0) {
    fail("{}: '{}' is more than a 64-bit byte count holds (at most 16 EiB)", what, text);
  }
  return static_cast<size_t>(bytes);
}

}  // namespace kiln
