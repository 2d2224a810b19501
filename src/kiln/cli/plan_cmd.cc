// kiln plan RECIPE [key=value ...] [--nnodes N] [--device cpu|cuda] [--memory-per-device SIZE]
// [--json]: the memory plan of a recipe's run, without weights (the model's config.json, or a
// preset named by model.path), and which settings would fit the memory each rank has.
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdio>

#include "kiln/base/error.h"
#include "kiln/cli/commands.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/model/config.h"
#include "kiln/model/layout.h"
#include "kiln/train/memory_plan.h"

namespace kiln::cli {

namespace {

struct PlanOpts {
  std::string recipe;
  std::vector<std::string> overrides;
  int nnodes = 1;
  std::string device;  // empty: train.device (auto plans for the CPU)
  std::string memory;  // empty: the CPU's RAM shared by the node's workers, or 24GiB per GPU
  bool json = false;
};

// model.path: a model directory's config.json, or the name of a preset (the recipe resolves
// every path, so a preset name arrives as <recipe dir>/<name>: one that is not a directory).
ModelConfig plan_config(const Recipe& r) {
  const fs::path dir(r.model.path);
  if (fs::exists(dir / "config.json")) return read_config(dir / "config.json");
  if (!r.model.hub_note.empty()) fail("{}", r.model.hub_note);  // an ORG/NAME found nowhere
  if (!fs::exists(dir)) {
    for (const auto& name : preset_names()) {
      if (name == dir.filename().string()) return preset_config(name);
    }
  }
  fail("model.path: {} has no config.json and is not a preset ({})", r.model.path,
       fmt::join(preset_names(), ", "));
}

size_t machine_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
}

double gib(size_t b) { return static_cast<double>(b) / 1073741824.0; }

// One alternative setting and its plan.
struct Option {
  ShardStrategy strategy;
  bool recompute;
  int micro_batch, world_size;
  size_t peak;
};

Option try_setting(const ModelConfig& c, Recipe r, ShardStrategy strategy, bool recompute,
                   int micro_batch, int world, int nnodes, bool on_cpu) {
  r.dist.strategy = strategy;
  r.train.activation_checkpointing = recompute;
  r.train.micro_batch_size = micro_batch;
  const MemorySettings s = memory_settings(r, world, std::max(1, world / nnodes), on_cpu);
  return {strategy, recompute, micro_batch, world, plan_memory(c, s).peak};
}

// For each strategy and recomputation: the plan at the recipe's size, the largest micro-batch
// (doubling, up to 64x the recipe's) and the fewest ranks (doubling, up to 1024 per node) that
// fit, or 0 when none does.
struct Fit {
  Option at_recipe;
  int largest_micro_batch = 0, fewest_ranks = 0;
};

std::vector<Fit> fits(const ModelConfig& c, const Recipe& r, int world, int nnodes, bool on_cpu,
                      size_t budget) {
  std::vector<ShardStrategy> strategies = {ShardStrategy::kFullShard, ShardStrategy::kShardGradOp,
                                           ShardStrategy::kNoShard};
  if (nnodes > 1) strategies.push_back(ShardStrategy::kHybridShard);
  std::vector<Fit> out;
  for (const auto& st : strategies) {
    for (bool rc : {false, true}) {
      Fit f;
      const int mb = r.train.micro_batch_size;
      f.at_recipe = try_setting(c, r, st, rc, mb, world, nnodes, on_cpu);
      for (int b = 1; b <= 64 * mb; b *= 2) {
        if (try_setting(c, r, st, rc, b, world, nnodes, on_cpu).peak <= budget) {
          f.largest_micro_batch = b;
        }
      }
      for (int w = nnodes; w <= 1024 * nnodes && f.fewest_ranks == 0; w *= 2) {
        if (try_setting(c, r, st, rc, mb, w, nnodes, on_cpu).peak <= budget) f.fewest_ranks = w;
      }
      out.push_back(f);
    }
  }
  return out;
}

void print_text(const ModelConfig& c, const Recipe& r, const MemoryPlan& p, int world, bool on_cpu,
                size_t budget, const std::vector<Fit>& fit) {
  auto line = [](const char* what, size_t b) {
    std::printf("  %-26s %10.1f MiB\n", what, b / 1048576.0);
  };
  const std::string lora = r.lora
                               ? fmt::format(" (frozen), LoRA rank {} on {} target(s): {} train",
                                             r.lora->rank, r.lora->targets.size(),
                                             parameter_count_text(lora_parameter_count(c, *r.lora)))
                               : "";
  std::printf("kiln plan: %s parameters%s; %d rank(s), %s; micro-batch %d x %d tokens; %s; %s\n",
              parameter_count_text(parameter_count(c)).c_str(), lora.c_str(), world,
              world == 1 ? "one process" : name_of(kShardStrategyNames, r.dist.strategy),
              r.train.micro_batch_size, r.data.seq_len, name_of(kComputeDTypeNames, r.train.dtype),
              on_cpu ? "cpu (peak RSS)" : "cuda (device memory)");
  std::printf("rank 0 (the largest: it also writes final/):\n");
  line("params (shard)", p.params);
  line("grads (shard)", p.grads);
  line("optimizer state (shard)", p.optimizer);
  line("gathered units", p.gathered);
  std::printf("  %-26s %10.1f MiB (%s)\n", "  largest gathered", p.largest_gathered / 1048576.0,
              p.largest_unit.c_str());
  if (!p.reference.empty()) {
    std::printf("  %-26s %10.1f MiB (%s)\n", "dpo reference", p.reference_bytes / 1048576.0,
                p.reference.c_str());
  }
  line("gradient buffers", p.grad_buffers);
  line("communication buffers", p.comm);
  line("  communicator scratch", p.comm_scratch);
  line("activations", p.activations);
  line("  recomputation off", p.activations_full);
  line("  recomputation on", p.activations_recompute);
  line("workspace", p.workspace);
  line("checkpoint snapshot", p.snapshot);
  line("final save", p.final_save);
  line("other (batch, RoPE tables)", p.other);
  if (on_cpu) line("process", p.baseline);
  // A GPU's memory beside kiln's allocations, with where each figure comes from.
  for (const auto& [what, part] :
       {std::pair{"CUDA context", &p.cuda_context}, std::pair{"NCCL buffers", &p.nccl_buffers}}) {
    if (part->source.empty()) continue;
    std::printf("  %-26s %10.1f MiB (%s)\n", what, part->bytes / 1048576.0, part->source.c_str());
  }
  std::printf("  %-26s %10.1f MiB = %.2f GiB; %.2f GiB per device: %s\n", "predicted peak",
              p.peak / 1048576.0, gib(p.peak), gib(budget),
              p.peak <= budget ? "fits" : "does NOT fit");
  std::printf(
      "settings (strategy, recomputation): peak at this size; largest micro-batch and fewest "
      "ranks that fit (-: none)\n");
  for (const Fit& f : fit) {
    const Option& o = f.at_recipe;
    std::printf("  %-13s %-3s %8.2f GiB %-12s micro-batch <= %-4s ranks >= %s\n",
                name_of(kShardStrategyNames, o.strategy), o.recompute ? "on" : "off", gib(o.peak),
                o.peak <= budget ? "fits" : "too large",
                f.largest_micro_batch ? std::to_string(f.largest_micro_batch).c_str() : "-",
                f.fewest_ranks ? std::to_string(f.fewest_ranks).c_str() : "-");
  }
}

Json to_json(const ModelConfig& c, const Recipe& r, const MemoryPlan& p, int world, size_t budget,
             const std::vector<Fit>& fit) {
  Json j = p.to_json();
  j["parameters"] = parameter_count(c);
  j["trainable_parameters"] = r.lora ? lora_parameter_count(c, *r.lora) : parameter_count(c);
  j["world_size"] = world;
  j["memory_per_device_bytes"] = budget;
  j["fits"] = p.peak <= budget;
  Json options = Json::array();
  for (const Fit& f : fit) {
    options.push_back({{"strategy", name_of(kShardStrategyNames, f.at_recipe.strategy)},
                       {"recompute", f.at_recipe.recompute},
                       {"peak_bytes", f.at_recipe.peak},
                       {"fits", f.at_recipe.peak <= budget},
                       {"largest_micro_batch", f.largest_micro_batch},
                       {"fewest_ranks", f.fewest_ranks}});
  }
  j["settings"] = options;
  return j;
}

// The exit status when the recipe's own plan does not fit (an error exits 1), so a script can
// gate a run on `kiln plan`.
constexpr int kExitDoesNotFit = 3;

int run_plan(const PlanOpts& o) {
  const Recipe r = load_recipe(o.recipe, o.overrides, RecipeUse::kPlan);
  if (o.nnodes < 1) fail("--nnodes: {} is not a node count (>= 1)", o.nnodes);
  if (!o.device.empty() && !is_named(kDeviceRequestNames, o.device)) {
    fail("--device: '{}' is not cpu or cuda", o.device);
  }
  const DeviceRequest device =
      o.device.empty() ? r.train.device : parse_named(kDeviceRequestNames, o.device, "--device");
  const bool on_cpu = device != DeviceRequest::kCuda;
  const ModelConfig c = plan_config(r);
  if (r.lora) r.lora->check_rank_fits(c, "lora.rank");  // as training checks it
  const int world = r.dist.nproc_per_node * o.nnodes;
  const size_t budget = !o.memory.empty() ? parse_memory_size(o.memory, "--memory-per-device")
                        : on_cpu
                            ? machine_memory_bytes() / static_cast<size_t>(r.dist.nproc_per_node)
                            : size_t{24} << 30;
  MemorySettings s = memory_settings(r, world, r.dist.nproc_per_node, on_cpu);
  const MemoryPlan p = plan_memory(c, s);
  const auto fit = fits(c, r, world, o.nnodes, on_cpu, budget);
  if (o.json) {
    std::printf("%s\n", to_json(c, r, p, world, budget, fit).dump(2).c_str());
  } else {
    print_text(c, r, p, world, on_cpu, budget, fit);
  }
  return p.peak <= budget ? 0 : kExitDoesNotFit;
}

}  // namespace

Command add_plan(CLI::App& app) {
  auto o = std::make_shared<PlanOpts>();
  CLI::App* sub = app.add_subcommand(
      "plan",
      "Predict a recipe's memory per rank (no weights or data needed) and which settings fit; "
      "exits 3 when the recipe's plan does not fit");
  sub->add_option("recipe", o->recipe, "Recipe YAML (model.path: a model directory or a preset)")
      ->required();
  sub->add_option("overrides", o->overrides, "Overrides such as dist.nproc_per_node=4");
  sub->add_option("--nnodes", o->nnodes, "Nodes (each with dist.nproc_per_node ranks)")
      ->capture_default_str();
  sub->add_option("--device", o->device, "cpu or cuda (default: train.device; auto plans the CPU)");
  sub->add_option("--memory-per-device", o->memory,
                  "Memory each rank may use, e.g. 24GiB (default: a GPU's 24 GiB, or this "
                  "machine's RAM shared by dist.nproc_per_node workers)");
  sub->add_flag("--json", o->json, "Print one JSON object (peak_bytes and the parts)");
  return {sub, [o] { return run_plan(*o); }};
}

}  // namespace kiln::cli
