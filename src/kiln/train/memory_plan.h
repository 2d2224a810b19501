// The memory plan: what one rank of a training run holds at its peak, predicted before step 1
// from the model's config and the run's settings, part by part, so a run that will not fit is
// known before it loads a byte. The trainer prints it on every rank and, at the end, beside the
// measured peak; `kiln plan` prints it for a recipe without weights.
//
// The plan is not a second copy of the code's sizing rules: it runs the real code. The trainer's
// own TrainCore (train_core.h: the Decoder, Fsdp, Optimizer and the step over them) and the
// checkpoint saves' buffers run two training steps (the first learns the prefetch order, the
// second prefetches), an evaluation, a background save's snapshot and the final save on a
// CountingBackend (kernels/device/counting_backend.h: nothing allocated, nothing computed, every
// allocation and every op's scratch counted with the CPU's or CUDA's own sizing functions)
// through communicators that move nothing (comm/null_communicator.h) of the run's world size, as
// rank 0 (the largest rank: it also writes final/). The peak is the run's; the parts are read from
// where the memory was allocated: the shards (Fsdp, Optimizer), FSDP's pool by use (PoolBooks), the
// model's activation arena, the backend's own scratch, the communicators' scratch and the saves'
// host buffers.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "kiln/base/json.h"
#include "kiln/fsdp/fsdp.h"
#include "kiln/model/config.h"
#include "kiln/train/gpu_runtime_memory.h"
#include "kiln/train/optimizer.h"
#include "kiln/train/recipe.h"
#include "kiln/train/train_core.h"

namespace kiln {

// The process before kiln allocates anything for the run (binary, libraries, thread pools),
// measured for kiln's CPU build on Linux x86-64; the trainer uses its own reading instead.
inline constexpr size_t kDefaultBaselineBytes = size_t{16} << 20;

struct MemorySettings {
  int world_size = 1;
  // Ranks each unit is sharded over: the world (full_shard, shard_grad_op), the node
  // (hybrid_shard); 1 under no_shard (and for one process).
  int shard_size = 1;
  ShardStrategy strategy = ShardStrategy::kNoShard;
  bool bf16 = false;         // train.dtype bf16 (the backend decides what it stores in bf16)
  bool reduce_bf16 = false;  // dist.reduce_dtype bf16
  bool prefetch = true;      // dist.prefetch: the next unit is gathered while one computes
  int micro_batch = 1;
  int seq_len = 512;
  int grad_accum = 1;            // train.grad_accum_steps: micro-batches per step
  StepSettings step;             // the step's own (recomputation, clipping), as rank 0 reads them
  OptimizerSettings optimizer;   // AdamW keeps m and v, SGD with momentum m
  bool background_save = false;  // checkpoint.every_steps > 0 with checkpoint.background
  bool writes_final = true;      // this rank writes final/ (rank 0)
  bool on_cpu = true;            // device memory is this process's RAM
  int cpu_threads = 1;           // on the CPU: each worker's OpenMP team (per-thread scratch)
  bool gloo = true;              // collectives through Gloo (its reduce-scatter keeps scratch)
  // Gloo's bulk collectives through the same-host shared memory lane (every rank on one host):
  // its segment replaces the reduce-scatter's scratch.
  bool shm_lane = false;
  bool eval = false;  // data.eval: evaluations run the fused cross-entropy (forward only)
  // lora: adapters train on a frozen base (kept in the compute dtype, no gradient or state).
  std::optional<LoraConfig> lora;
  size_t baseline = kDefaultBaselineBytes;
};

// Bytes per rank.
struct MemoryPlan {
  // This rank's shards (padded units): fp32, a LoRA run's frozen base in the compute dtype and
  // without gradients or optimizer state.
  size_t params = 0, grads = 0, optimizer = 0;
  size_t gathered = 0;          // FSDP's pooled gathered units (all-gather outputs)
  size_t grad_buffers = 0;      // whole-unit gradients (reduce-scatter inputs)
  size_t comm = 0;              // reduced shards and dtype copies (reduce-scatter outputs)
  size_t comm_scratch = 0;      // the communicator's own (Gloo's reduce-scatter partial sums, or
                                // the shared memory lane's segment)
  size_t largest_gathered = 0;  // the largest unit as gathered (bf16 under train.dtype bf16)
  std::string largest_unit;     // its name
  size_t activations = 0;       // the arena for this run's recomputation setting
  size_t activations_full = 0, activations_recompute = 0;  // without and with recomputation
  // The backend's own scratch: the cross-entropy's chunk buffers; on the CPU also the GEMM
  // libraries' allowance, on CUDA cuBLASLt's workspace, cast copies and attention's scratch.
  size_t workspace = 0;
  size_t snapshot = 0;  // host copy of the shard for background checkpoints
  // The final save's host buffer: the largest tensor of the shard file, on rank 0 the largest
  // unit of final/ (f32).
  size_t final_save = 0;
  size_t other = 0;  // held at the peak beside the parts above (the batch's staging, RoPE tables)
  // A preference run's (dpo section) reference: what it is, in words ("" without dpo), and the
  // bytes of its own shards and gathered units (0 with LoRA or SimPO).
  std::string reference;
  size_t reference_bytes = 0;
  size_t baseline = 0;
  // On a GPU, beside kiln's allocations (gpu_runtime_memory.h): the CUDA context, and NCCL's
  // buffers when the ranks talk through NCCL (world > 1). 0 and empty on the CPU.
  RuntimeMemoryPart cuda_context, nccl_buffers;
  size_t device_peak = 0;  // kiln's device memory at the peak (on the CPU, part of the RSS)
  // The predicted peak for the device: RSS on the CPU; on a GPU device_peak + cuda_context +
  // nccl_buffers.
  size_t peak = 0;

  Json to_json() const;
  std::string summary() const;  // one line, MiB
};

MemoryPlan plan_memory(const ModelConfig& config, const MemorySettings& s);

// The settings of rank 0 of a run of `r` over `world_size` ranks, `per_node` of them on each
// node (hybrid_shard shards over a node), on the CPU or a GPU.
MemorySettings memory_settings(const Recipe& r, int world_size, int per_node, bool on_cpu);

// "24GiB", "512MiB", "1.5GB", "1000000": bytes. Errors name `what` (the option or field).
size_t parse_memory_size(const std::string& text, const std::string& what);

}  // namespace kiln
