// kiln export --checkpoint CKPT --out DIR [--dtype f32|bf16|f16]: a Hugging Face model directory;
// of a LoRA run, its adapters as a PEFT adapter directory, or with --merge the merged model.
// kiln export --model M --adapter A --out DIR [--merge] [--dtype ...]: a PEFT adapter applied to
// the HF model M (model/adapted_model.h), written back as a PEFT adapter directory (in --dtype,
// with M's tokenizer files and chat template), or with --merge as a complete HF model with
// W + s B A folded into every target (model/lora_export.h, which a LoRA run's checkpoints use too).
// A run's checkpoints and --adapter's LoRA runs come through train/checkpoint_model.h, as eval and
// generate read them; --merge onto a base other than the adapters' own is refused unless
// --allow-other-base.
// --template NAME sets the directory's chat template (tokenizer_config.json's chat_template).
#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/cli/chat_options.h"
#include "kiln/cli/commands.h"
#include "kiln/model_files/adapted_model.h"
#include "kiln/model_files/hf_checkpoint.h"
#include "kiln/model_files/hf_model_files.h"
#include "kiln/model_files/lora_export.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/checkpoint_model.h"

namespace kiln::cli {

namespace {
// Accepts "5GB", "500MB", "2GiB", or plain bytes.
uint64_t parse_size(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    fail("--max-shard-size: cannot parse '{}'", s);
  }
  const std::string unit = s.substr(pos);
  double mult = 1;
  if (unit == "" || unit == "B")
    mult = 1;
  else if (unit == "KB")
    mult = 1e3;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GB")
    mult = 1e9;
  else if (unit == "KiB")
    mult = 1024.0;
  else if (unit == "MiB")
    mult = 1024.0 * 1024;
  else if (unit == "GiB")
    mult = 1024.0 * 1024 * 1024;
  else
    fail("--max-shard-size: unknown unit '{}' (B, KB, MB, GB, KiB, MiB, GiB)", unit);
  if (!(v > 0)) fail("--max-shard-size must be positive");
  return static_cast<uint64_t>(v * mult);
}

struct ExportOpts {
  std::string checkpoint, model, adapter, out, dtype = "f32", max_shard = "5GB", chat_template;
  bool merge = false, allow_other_base = false;
};

// The non-weight files of the directory `from`, with --template's chat template when given.
HfModelFiles export_files(const ExportOpts& o, const fs::path& from) {
  HfModelFiles files = HfModelFiles::read(from, {}, o.chat_template);
  if (o.chat_template.empty()) return files;
  if (!files.has_tokenizer()) {
    fail("--template: {} has no tokenizer.json, so the export has no chat template to set",
         from.string());
  }
  if (!files.replaced_chat_template().empty()) {
    KILN_LOG_INFO("{}: chat template {} (--template) replaces the base's {}", o.out,
                  o.chat_template, files.replaced_chat_template());
  }
  return files;
}

// --out names neither input (an export never overwrites what it reads).
void check_out_differs(const fs::path& out, const fs::path& in, const char* what) {
  if (fs::weakly_canonical(in) == fs::weakly_canonical(out))
    fail("--out must differ from the {} directory", what);
}

// The adapters of `src` written out: as a PEFT adapter directory (the base's weights are not
// read), or with --merge folded into its base, whose every tensor is checked against the config.
void export_adapters(const ExportOpts& o, const ModelSource& src, const HfModelFiles& files,
                     DType dtype, uint64_t max_shard) {
  const AdaptedModel& m = src.model;
  const ParamLayout layout(m.config, m.lora());
  if (!o.merge) {
    const std::string& named = m.adapter->config.base_model_name_or_path;
    export_lora_adapter(
        o.out, m.config, layout,
        adapted_unit_reader(m, layout,
                            [](int u, float*) { KILN_CHECK(false, "base unit {} read", u); }),
        named.empty() ? src.base.string() : named, files, dtype,
        m.adapter->config.base_fingerprint);
    return;
  }
  check_source_base(src, o.allow_other_base);
  const ParamLayout base(m.config);
  export_lora_merged(o.out, m.config, layout,
                     adapted_unit_reader(m, layout, weights_unit_reader(src.base, base)), files,
                     dtype, max_shard);
}

// --model M [--adapter A [--merge]]: the HF model M, with the adapter A applied.
void export_model(const ExportOpts& o, DType dtype, uint64_t max_shard) {
  check_out_differs(o.out, o.model, "--model");
  if (!o.adapter.empty()) check_out_differs(o.out, o.adapter, "--adapter");
  // Everything is read and checked (config, adapter names and shapes, the base's tensors when
  // they are read) before the first file is written.
  const ModelSource src = open_model_source(o.model, o.adapter);
  const HfModelFiles files = export_files(o, src.dir);  // config, tokenizer, generation
  if (src.model.adapter) return export_adapters(o, src, files, dtype, max_shard);
  const ParamLayout base(src.model.config);
  save_hf_model_dir(o.out, files, base, weights_unit_reader(src.base, base), dtype, max_shard);
}

// --checkpoint CKPT: a run directory, a sharded checkpoint or a HF model directory. Returns the
// directory it read (a run's final/ or newest checkpoint; a LoRA run's final/ is an adapter
// directory, so its newest checkpoint). A LoRA run's: its adapters, or merged into its base.
fs::path export_checkpoint(const ExportOpts& o, DType dtype, uint64_t max_shard) {
  const fs::path src = resolve_run_path(o.checkpoint);
  if (!fs::exists(src)) fail("{}: no such checkpoint", o.checkpoint);
  if (!fs::exists(src / "config.json")) {
    fail("{}: not a model, checkpoint or run directory (no config.json)", o.checkpoint);
  }
  check_out_differs(o.out, src, "checkpoint");
  if (std::optional<LoraCheckpoint> lora = read_lora_checkpoint(src)) {
    const ModelSource s{lora->dir, lora->base, std::move(lora->model), lora->dir.string()};
    export_adapters(o, s, export_files(o, src), dtype, max_shard);
    return src;
  }
  if (o.merge) {
    fail("--merge: {} is not a LoRA run's checkpoint (nothing to fold in)", src.string());
  }
  const ModelConfig c = read_config(src / "config.json");
  const ParamLayout layout(c);
  // Streamed unit by unit: memory is bounded by one unit, never the whole model.
  const HfModelFiles files = export_files(o, src);  // config, tokenizer, generation
  save_hf_model_dir(o.out, files, layout, weights_unit_reader(src, layout), dtype, max_shard);
  return src;
}
}  // namespace

Command add_export(CLI::App& app) {
  auto o = std::make_shared<ExportOpts>();
  CLI::App* sub = app.add_subcommand(
      "export",
      "Write a checkpoint (a run directory or a model directory) as a HF model directory");
  auto* checkpoint =
      sub->add_option("--checkpoint", o->checkpoint,
                      "A run directory (its final/ model, else its newest checkpoint), a "
                      "checkpoint directory (checkpoints/step-N) or a HF model directory");
  auto* model = sub->add_option("--model", o->model,
                                "A HF model directory, exported with --adapter applied (instead "
                                "of --checkpoint)")
                    ->excludes(checkpoint);
  sub->add_option("--adapter", o->adapter,
                  "A PEFT LoRA adapter directory (or a LoRA run or checkpoint) for --model: "
                  "written back as a PEFT adapter directory with --model's tokenizer files, or "
                  "merged with --merge")
      ->needs(model);
  sub->add_flag("--merge", o->merge,
                "Fold the adapter into --model's weights (W + s B A), or a LoRA run's "
                "--checkpoint into its base: a complete HF model directory");
  sub->add_flag("--allow-other-base", o->allow_other_base,
                "With --merge: fold adapters into a base other than the one they were trained on");
  sub->add_option("--out", o->out, "Output directory")->required();
  sub->add_option("--dtype", o->dtype, "f32 or bf16 (or f16)")->capture_default_str();
  add_template_option(sub, o->chat_template,
                      "The chat template the directory carries (tokenizer_config.json's "
                      "chat_template), in place of the checkpoint's or --model's own");
  sub->add_option("--max-shard-size", o->max_shard,
                  "Shard a model's weights above this size (not an adapter's)")
      ->capture_default_str();
  return {sub, [o] {
            const auto dtype = dtype_from_cli(o->dtype);
            if (!dtype) fail("--dtype: unknown dtype '{}' (f32, bf16, f16)", o->dtype);
            if (o->checkpoint.empty() && o->model.empty())
              fail("--checkpoint or --model is required (what to export)");
            // Nothing to fold in: writing the base unchanged would hide a forgotten --adapter.
            if (o->merge && o->adapter.empty() && o->checkpoint.empty())
              fail("--merge needs --adapter (a PEFT adapter directory to fold into --model)");
            const uint64_t max_shard = parse_size(o->max_shard);
            fs::path from = o->model;
            if (o->model.empty()) {
              from = export_checkpoint(*o, *dtype, max_shard);
            } else {
              export_model(*o, *dtype, max_shard);
            }
            KILN_LOG_INFO("exported {}{}{} -> {} ({})", from.string(),
                          o->adapter.empty() ? "" : " + adapter " + o->adapter,
                          o->merge ? " (merged)" : "", o->out, o->dtype);
            return 0;
          }};
}

}  // namespace kiln::cli
