// Training recipe: a YAML file plus `dotted.key=value` command-line overrides (as torchtune does).
// Every key is documented in docs/recipe.md; unknown keys are errors, so a typo never silently
// falls back to a default. A key is one row of the schema (recipe_schema.cc: its name, whether it
// defines the run, how it is read, checked and written); the struct below holds the values and
// their defaults; checks across keys are validate's (recipe.cc).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kiln/base/named_values.h"
#include "kiln/comm/comm_request.h"
#include "kiln/comm/pair_auth.h"
#include "kiln/comm/private_network_mode.h"
#include "kiln/comm/transport.h"
#include "kiln/data/data_format.h"
#include "kiln/data/overlong.h"
#include "kiln/fsdp/shard_strategy.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/model/lora_config.h"
#include "kiln/model_files/output_dtype.h"
#include "kiln/tensor/dtype.h"
#include "kiln/train/best_checkpoint.h"
#include "kiln/train/optimizer_kind.h"
#include "kiln/train/preference_config.h"

namespace kiln {

namespace fs = std::filesystem;

// train.resume: where a run starts, its two keywords listed once (base/named_values.h); any other
// value names a checkpoint directory. none: from model.path, a fresh run (an output.dir holding
// checkpoints is refused unless output.overwrite); auto: the newest intact checkpoint in
// output.dir/checkpoints, or a fresh start when there is none; checkpoint: that directory.
enum class ResumeMode { kNone, kAuto, kCheckpoint };
inline constexpr std::array<Named<ResumeMode>, 2> kResumeKeywords = {{
    {ResumeMode::kNone, "none"},
    {ResumeMode::kAuto, "auto"},
}};
struct ResumeFrom {
  ResumeMode mode = ResumeMode::kNone;
  std::string checkpoint;  // kCheckpoint: the directory, absolute and normalised; else ""
  bool operator==(const ResumeFrom&) const = default;
  // As the recipe spells it: "none", "auto" or the checkpoint directory.
  std::string text() const {
    return mode == ResumeMode::kCheckpoint ? checkpoint : name_of(kResumeKeywords, mode);
  }
};

struct Recipe {
  // Every path in a recipe (model.path, model.adapter, data.train, data.tokenizer,
  // data.cache_dir, data.eval, output.dir, train.resume when a directory) resolves the same way: a
  // relative path in the recipe file against the recipe file's directory, one given as an override
  // against the current directory. Stored absolute and normalised, so a recipe written by
  // recipe_to_yaml names the same files from anywhere.
  struct Model {
    std::string path;  // required: a Hugging Face model directory
    // A PEFT adapter directory (model/peft_adapter.h) whose adapters training continues; "" = new
    // adapters. Needs a lora section that agrees with its adapter_config.json.
    std::string adapter;
    // model.path or model.adapter may be a hub id ORG/NAME (hub/model_location.h, docs/hub.md): a
    // local path wins, then the Hugging Face cache. revision: model.path's branch, tag or commit
    // ("" = main); once resolved, the commit read. download: fetch a repository missing from the
    // cache (off: a typo never starts a download). hub_id: "ORG/NAME" when path is its snapshot.
    std::string revision;
    bool download = false;
    std::string hub_id;
    // A hub id found neither locally nor in the cache: the one-line rule the preflight fails with.
    // A note of this reading, not part of the recipe: equality leaves it out (the written recipe,
    // whose path is absolute, reads back without it).
    std::string hub_note;
    // adapter_config.json's base_model_name_or_path: the hub id (PEFT and vLLM find it), else path.
    const std::string& base_name() const { return hub_id.empty() ? path : hub_id; }
    bool operator==(const Model& o) const {
      return path == o.path && adapter == o.adapter && revision == o.revision &&
             download == o.download && hub_id == o.hub_id;
    }
  };
  // One data.train entry: a path, or {path, format, weight} in the recipe.
  struct TrainFile {
    std::string path;
    // A data format (data/formats.h; aliases read as the format they name); nullopt: data.format.
    std::optional<DataFormat> format;
    // > 0: the examples it adds to each epoch, as a multiple of its own (data/mixture.h): 0.5
    // a seeded half of the file, 2 every example twice.
    double weight = 1.0;
    bool operator==(const TrainFile&) const = default;
  };
  struct Data {
    // Required: one file, or a list of files read as one dataset in the order given (each with
    // its own token cache, format and weight).
    std::vector<TrainFile> train;
    // The format of data.train entries that name none, and of data.eval; a name or alias of
    // data_format_names() (data/formats.h).
    DataFormat format = DataFormat::kTokens;
    // tokenizer.json or a directory holding one, for the text formats; empty: model.path.
    std::string tokenizer;
    // data.template, the chat formats' template: "" (the base's own when kiln knows it, qwen2.5
    // when it has none) or qwen2.5 | qwen3 | llama3 (text/chat_template_choice.h).
    std::string chat_template;
    // Qwen3's thinking switch for the chat formats; unset: the template's default (on).
    std::optional<bool> enable_thinking;
    int seq_len = 512;  // > 1: tokens per row
    // data.seq_len above the model's max_position_embeddings is refused unless true (RoPE then
    // extrapolates past the positions the model was trained on).
    bool allow_long_context = false;
    Overlong overlong = Overlong::kTruncate;  // truncate | drop: examples longer than seq_len
    bool pack = false;                        // several examples per row (data/packing_sampler.h)
    bool shuffle = true;
    bool train_on_prompt = false;  // loss on every token, not only on what the model answers
    bool skip_bad_lines = false;   // skip and count malformed lines instead of failing
    std::string cache_dir;         // tokenized cache; empty: <data dir>/.kiln-cache
    // Held-out data in data.format (optional), evaluated every eval.every_steps steps.
    std::string eval;
    // [0, 1): without data.eval, hold out this seeded fraction of data.train's examples (each
    // file's, by train.seed) as the evaluation data; 0: none. Exclusive with data.eval.
    double eval_split = 0.0;
    // Resume even though a data.train file's contents differ from what the checkpoint recorded
    // (its length and XXH3-64): the run then continues the old order over the new examples.
    bool allow_changed = false;
    bool operator==(const Data&) const = default;
  };
  struct Optimizer {
    OptimizerKind name = OptimizerKind::kAdamW;  // adamw | sgd (train/optimizer_kind.h)
    double lr = 1e-5;                            // > 0: peak learning rate
    double weight_decay = 0.0;                   // >= 0 (decoupled for AdamW)
    std::array<double, 2> betas = {0.9, 0.999};  // AdamW (beta1, beta2), each in [0, 1)
    double eps = 1e-8;                           // > 0, AdamW
    double momentum = 0.0;                       // [0, 1), SGD only
    bool operator==(const Optimizer&) const = default;
  };
  struct Schedule {
    ScheduleKind name = ScheduleKind::kConstant;  // constant | linear | cosine
    int64_t warmup_steps = 0;                     // >= 0: linear warmup from 0 to lr
    double min_lr_ratio = 0.0;  // [0, 1]: final lr / lr for linear and cosine decay
    bool operator==(const Schedule&) const = default;
  };
  struct Train {
    int64_t max_steps = 100;   // > 0 optimizer steps
    int64_t epochs = 0;        // >= 0; > 0: train this many epochs (max_steps is ignored)
    int micro_batch_size = 1;  // > 0 rows per forward/backward on each rank
    // > 0 micro-batches per optimizer step; a step holds all of them (kMaxStepTokens)
    int grad_accum_steps = 1;
    double grad_clip = 1.0;  // >= 0: max global grad norm; 0 disables clipping
    uint64_t seed = 0;
    bool activation_checkpointing = false;
    int64_t log_every = 1;  // > 0 steps between metric lines
    // none (default), auto (the newest complete checkpoint in output.dir/checkpoints, or a fresh
    // start when there is none) or a checkpoint directory, resolved like every path
    // (ResumeFrom above).
    ResumeFrom resume;
    // fp32 | bf16 (kComputeDTypeNames): compute dtype. bf16 is mixed precision: bf16 GEMM
    // inputs, fp32 master weights, optimizer state and accumulation.
    ComputeDType dtype = ComputeDType::kFp32;
    // auto (CUDA when a GPU is visible and this build has CUDA, else the CPU, with a notice) |
    // cpu | cuda (kDeviceRequestNames): where the step runs (kernels/device/backend.h).
    DeviceRequest device = DeviceRequest::kAuto;
    bool operator==(const Train&) const = default;
  };
  struct Output {
    std::string dir;           // required
    DType dtype = DType::F32;  // f32 | bf16 (model/output_dtype.h): the final model's weights
    bool tensorboard = true;   // event files under dir/tensorboard/
    // A run with train.resume=none into a dir that holds checkpoints: refused unless true, when
    // the old checkpoints and final model are deleted first.
    bool overwrite = false;
    bool operator==(const Output&) const = default;
  };

  struct Dist {
    // full_shard | shard_grad_op | no_shard | hybrid_shard (src/kiln/fsdp/shard_strategy.h)
    ShardStrategy strategy = ShardStrategy::kFullShard;
    int nproc_per_node = 1;      // > 0 workers the launcher spawns on this node
    double timeout_s = 300;      // > 0: every collective and rendezvous wait
    bool prefetch = true;        // all-gather the next unit while the current one computes
    int threads_per_worker = 0;  // >= 0; 0 = this machine's cores / local workers
    // none ("" in the recipe: no requirement) | gloo-tcp | socket | loopback | efa: the group's
    // transport must deliver it or training stops before step 1 (src/kiln/comm/transport.h).
    std::optional<TransportKind> require_transport;
    // "auto" | "nccl" | "gloo": the communicator (src/kiln/launch/comm_choice.h). auto: NCCL
    // when the device is CUDA and every rank of a node has a GPU of its own, else Gloo.
    CommRequest communicator = CommRequest::kAuto;
    // fp32 | bf16 (kReduceDTypeNames): the dtype gradients are reduce-scattered (all-reduced
    // for no_shard and across hybrid_shard's nodes) in; bf16 halves the bytes, sums are then
    // rounded to bf16.
    DType reduce_dtype = DType::F32;
    // "auto" | "on" | "off": a single-node group runs in a network namespace of its own, out of
    // reach of the host's processes (src/kiln/launch/private_network.h). auto: when the kernel
    // allows one, else a warning; on: refuse to start without one.
    PrivateNetwork private_network = PrivateNetwork::kAuto;
    // "auto" | "on" | "off": every connection between two ranks' Gloo pairs proves it knows the
    // job's token (src/kiln/comm/auth_tcp/), so a stray or hostile connection to a
    // collective's listener is rejected instead of failing the group. auto: when the group
    // spans hosts (one node is isolated by its private network instead); on: always; off: never.
    PairAuth authenticate_pairs = PairAuth::kAuto;
    bool operator==(const Dist&) const = default;
  };

  struct Checkpoint {
    int64_t every_steps = 0;  // >= 0: a sharded checkpoint every N steps (0: only at the end)
    int64_t keep_last = 2;    // >= 0: checkpoints kept (0 keeps all)
    int64_t keep_best = 0;    // >= 0: also keep the N best by best_metric (0: off)
    BestMetric best_metric = BestMetric::kEvalLoss;  // a reported metric: eval_loss | loss
    BestMode best_mode = BestMode::kMin;             // min | max
    bool background = true;  // write shards on a background thread while training continues
    bool operator==(const Checkpoint&) const = default;
  };
  struct Eval {
    int64_t every_steps = 0;  // >= 0: evaluate data.eval every N steps (0: only at the end)
    int64_t max_batches = 0;  // >= 0: batches per evaluation on each rank (0: the whole file)
    bool operator==(const Eval&) const = default;
  };
  struct Failure {
    int64_t max_restarts = 0;  // >= 0: group restarts from the newest checkpoint
    // (0, 3600]: after SIGTERM/SIGINT the workers get this long to finish their step and commit
    // a checkpoint before the launcher kills them; below Kubernetes'
    // terminationGracePeriodSeconds.
    double sigterm_grace_s = 25;
    bool operator==(const Failure&) const = default;
  };

  Model model;
  // The lora section: LoRA adapters on a frozen base (model/lora_config.h). A section present,
  // even empty, trains adapters with its defaults (rank 8, alpha 16, dropout 0, every projection,
  // no rslora); no section (nullopt) is full fine-tuning.
  std::optional<LoraConfig> lora;
  // The dpo section: preference tuning on data.format preference (preference_config.h); no
  // section (nullopt) is supervised fine-tuning.
  std::optional<DpoConfig> dpo;
  Data data;
  Optimizer optimizer;
  Schedule schedule;
  Train train;
  Output output;
  Dist dist;
  Eval eval;
  Checkpoint checkpoint;
  Failure failure;
  bool operator==(const Recipe&) const = default;
};

// The most tokens one optimizer step may hold: the trainer keeps every micro-batch of a step in
// memory (ids, positions, targets, document starts: 16 bytes a token) to count its targets before
// the first forward, so train.grad_accum_steps x train.micro_batch_size x data.seq_len is bounded
// (2^28 tokens, 4 GiB) instead of ending in std::bad_alloc.
inline constexpr int64_t kMaxStepTokens = int64_t{1} << 28;

// What a recipe is read for: training (and prepare-data) needs data.train; planning memory
// (`kiln plan`) does not read the data.
enum class RecipeUse { kTrain, kPlan };

// Reads `yaml_path` and applies `overrides` (each "dotted.key=value", the value parsed as YAML, so
// "optimizer.betas=[0.9,0.95]" and "train.activation_checkpointing=true" work). Throws kiln::Error
// with one line naming the file (and YAML line) or the override, and the key.
Recipe load_recipe(const fs::path& yaml_path, const std::vector<std::string>& overrides = {},
                   RecipeUse use = RecipeUse::kTrain);

// As load_recipe, from text. `what` names the source in errors; relative paths in the text
// resolve against `base_dir` (the current directory if empty).
Recipe parse_recipe(const std::string& yaml_text, const std::string& what, const fs::path& base_dir,
                    const std::vector<std::string>& overrides = {},
                    RecipeUse use = RecipeUse::kTrain);

// A complete YAML recipe of every effective value; load_recipe of it gives an equal Recipe.
std::string recipe_to_yaml(const Recipe& recipe);

// Every valid dotted key, in documentation order ("model.path", "data.train", ...).
const std::vector<std::string>& recipe_keys();
// The keys that define a run (run_identity.h), in the same order: marked in their schema rows.
const std::vector<std::string>& run_identity_keys();

// How relative paths resolve, in words for errors that name a resolved path: "a relative path
// in a recipe file is relative to the file's folder, one on the command line to the working
// directory".
const char* recipe_path_rule();

// The format of data.train entry `file`: its own, else data.format.
DataFormat train_file_format(const Recipe& recipe, const Recipe::TrainFile& file);

}  // namespace kiln
