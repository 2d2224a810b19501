#include "kiln/train/checkpoint_model.h"

#include <memory>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/hub/model_location.h"
#include "kiln/model_files/base_fingerprint.h"
#include "kiln/model_files/hf_checkpoint.h"
#include "kiln/model_files/lora_units.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/checkpoint_dir.h"
#include "kiln/train/checkpoint_manifest.h"
#include "kiln/train/run_identity.h"
#include "kiln/train/trainer.h"

namespace kiln {

namespace {

constexpr const char* kAllowFlag = "--allow-other-base";

bool is_checkpoint(const fs::path& dir) { return fs::exists(dir / "manifest.json"); }

// The adapter units of checkpoint `dir` for `config` and `lora`, as LoraTensors.
LoraTensors read_checkpoint_adapters(const fs::path& dir, const ModelConfig& config,
                                     const LoraConfig& lora) {
  const ParamLayout layout(config, lora);
  const CheckpointUnitReader reader(dir, layout);  // verifies every file first
  LoraTensors tensors(config, lora);
  std::vector<float> unit;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const int u = layout.lora_unit(static_cast<int>(l));
    unit.assign(layout.units()[u].numel, 0.0f);
    reader.read_unit(u, unit.data());
    lora_tensors_from_unit(layout, unit.data(), l, tensors);
  }
  return tensors;
}

// The adapter A of --adapter: a PEFT directory, or a LoRA run or checkpoint, fitted to `config`.
std::pair<PeftAdapter, std::string> read_adapter(const fs::path& a, const ModelConfig& config) {
  if (fs::exists(a / kPeftConfigFile)) return {read_peft_adapter(a, config), a.string()};
  const fs::path dir = resolve_run_path(a);
  if (!is_checkpoint(dir)) return {read_peft_adapter(a, config), a.string()};  // its error
  std::optional<LoraCheckpoint> c = read_lora_checkpoint(dir, &config);
  if (!c) {
    fail(
        "--adapter: {} is a full fine-tuning run's checkpoint, not adapters (evaluate it as "
        "--model)",
        dir.string());
  }
  return {std::move(*c->model.adapter), c->dir.string()};
}

}  // namespace

fs::path resolve_run_path(const fs::path& path) {
  for (const char* own : {"config.json", "manifest.json", kPeftConfigFile}) {
    if (fs::exists(path / own)) return path;
  }
  const fs::path final_dir = final_model_dir(path);
  if (fs::exists(final_dir / "config.json")) return final_dir;
  if (const auto latest = latest_checkpoint(path / "checkpoints")) return latest->dir;
  return path;
}

std::optional<LoraCheckpoint> read_lora_checkpoint(const fs::path& path,
                                                   const ModelConfig* config) {
  const fs::path dir = resolve_run_path(path);
  if (!is_checkpoint(dir)) return std::nullopt;
  const Recipe run = checkpoint_recipe(dir);
  if (!run.lora) return std::nullopt;
  LoraCheckpoint c{dir, run.model.path, {}};
  c.model.config = config ? *config : read_config(dir / "config.json");
  PeftAdapter a;
  a.config.lora = *run.lora;
  a.config.base_model_name_or_path = run.model.base_name();
  a.tensors = read_checkpoint_adapters(dir, c.model.config, *run.lora);
  const ParamLayout layout(c.model.config, *run.lora);
  a.config.base_fingerprint = read_manifest(dir, layout).state.base;
  c.model.adapter = std::move(a);
  return c;
}

ModelSource open_model_source(const fs::path& model_arg, const fs::path& adapter_arg) {
  // --model and --adapter may be hub ids (hub/model_location.h): a local path wins.
  const fs::path model = locate_model(model_arg.string(), {"--model", "", false}).dir;
  const fs::path adapter = adapter_arg.empty()
                               ? adapter_arg
                               : locate_model(adapter_arg.string(), {"--adapter", "", false}).dir;
  ModelSource s;
  s.dir = resolve_run_path(model);
  if (std::optional<LoraCheckpoint> c = read_lora_checkpoint(s.dir)) {
    if (!adapter.empty()) {
      fail(
          "--adapter: --model {} is a LoRA run's checkpoint, which brings its own adapters; give "
          "its base ({}) as --model to apply other ones",
          c->dir.string(), c->base.string());
    }
    s.base = c->base;
    s.model = std::move(c->model);
    s.adapters = c->dir.string();
  } else {
    s.base = s.dir;
    if (fs::exists(s.dir / kPeftConfigFile) && !fs::exists(s.dir / "config.json")) {
      fail(
          "--model: {} is a PEFT adapter directory (adapters, no base); give its base as --model "
          "and it as --adapter",
          s.dir.string());
    }
    s.model.config = read_config(s.dir / "config.json");
    if (!adapter.empty()) {
      auto [a, what] = read_adapter(adapter, s.model.config);
      s.model.adapter = std::move(a);
      s.adapters = std::move(what);
    }
  }
  return s;
}

void check_source_base(const ModelSource& s, bool allow_other_base) {
  // A full run's checkpoint as the base has no weight files to fingerprint (and is no base an
  // adapter was trained on, unless at step 0).
  if (!s.model.adapter || is_checkpoint(s.base)) return;
  check_adapter_base(s.model.adapter->config.base_fingerprint, s.adapters, s.base, allow_other_base,
                     kAllowFlag);
}

UnitReader weights_unit_reader(const fs::path& dir, const ParamLayout& layout) {
  if (is_checkpoint(dir)) {  // a full fine-tuning checkpoint
    auto reader = std::make_shared<const CheckpointUnitReader>(dir, layout);
    return [reader](int u, float* out) { reader->read_unit(u, out); };
  }
  auto reader = std::make_shared<const HfWeightsReader>(dir, layout);
  return [reader](int u, float* out) { reader->read_unit(u, out); };
}

void load_model_source(const ModelSource& s, const ParamLayout& layout, ParamStore& store) {
  const ParamLayout base(s.model.config);
  load_units(layout, adapted_unit_reader(s.model, layout, weights_unit_reader(s.base, base)),
             store);
}

}  // namespace kiln
