// kiln export --checkpoint CKPT --out DIR [--dtype f32|bf16]: a Hugging Face model directory.
#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/cli/commands.h"
#include "kiln/model/hf_checkpoint.h"
#include "kiln/model/hf_model_files.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/trainer.h"

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
}  // namespace

Command add_export(CLI::App& app) {
  struct Opts {
    std::string checkpoint, out, dtype = "f32", max_shard = "5GB";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "export",
      "Write a checkpoint (a run directory or a model directory) as a HF model directory");
  sub->add_option("--checkpoint", o->checkpoint,
                  "A run directory (its final/ model, else its newest checkpoint), a checkpoint "
                  "directory (checkpoints/step-N) or a HF model directory")
      ->required();
  sub->add_option("--out", o->out, "Output directory")->required();
  sub->add_option("--dtype", o->dtype, "f32 or bf16 (or f16)")->capture_default_str();
  sub->add_option("--max-shard-size", o->max_shard, "Shard the weights above this size")
      ->capture_default_str();
  return {sub, [o] {
            const auto dtype = dtype_from_cli(o->dtype);
            if (!dtype) fail("--dtype: unknown dtype '{}' (f32, bf16, f16)", o->dtype);
            fs::path src = o->checkpoint;
            // A run directory: its final model, else its newest checkpoint.
            if (!fs::exists(src / "config.json")) {
              if (fs::exists(final_model_dir(src) / "config.json")) {
                src = final_model_dir(src);
              } else if (auto latest = latest_checkpoint(src / "checkpoints")) {
                src = latest->dir;
              }
            }
            if (!fs::exists(src)) fail("{}: no such checkpoint", o->checkpoint);
            if (!fs::exists(src / "config.json")) {
              fail("{}: not a model, checkpoint or run directory (no config.json)", o->checkpoint);
            }
            if (fs::weakly_canonical(src) == fs::weakly_canonical(o->out)) {
              fail("--out must differ from the checkpoint directory");
            }
            const ModelConfig c = read_config(src / "config.json");
            const ParamLayout layout(c);
            const uint64_t max_shard = parse_size(o->max_shard);
            // Streamed unit by unit: memory is bounded by one unit, never the whole model.
            const HfModelFiles files = HfModelFiles::read(src);  // config, tokenizer, generation
            if (fs::exists(src / "manifest.json")) {             // a sharded kiln checkpoint
              CheckpointUnitReader reader(src, layout);
              save_hf_model_dir(
                  o->out, files, layout, [&](int u, float* out) { reader.read_unit(u, out); },
                  *dtype, max_shard);
            } else {
              HfWeightsReader reader(src, layout);
              save_hf_model_dir(
                  o->out, files, layout, [&](int u, float* out) { reader.read_unit(u, out); },
                  *dtype, max_shard);
            }
            KILN_LOG_INFO("exported {} -> {} ({})", src.string(), o->out, o->dtype);
            return 0;
          }};
}

}  // namespace kiln::cli
