// kiln init: a randomly initialised checkpoint of any family (a preset or a config.json) in Hugging
// Face layout.
#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/cli/commands.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/model/hf_checkpoint.h"
#include "kiln/model/init.h"

namespace kiln::cli {

Command add_init(CLI::App& app) {
  struct Opts {
    std::string config, out, dtype = "f32";
    uint64_t seed = 0;
    float std = 0.02f;
  };
  auto o = std::make_shared<Opts>();
  std::string presets;
  for (const auto& p : preset_names()) presets += (presets.empty() ? "" : ", ") + p;
  CLI::App* sub = app.add_subcommand("init", "Write a randomly initialised checkpoint (HF layout)");
  sub->add_option("--config", o->config, "A preset (" + presets + ") or a Hugging Face config.json")
      ->required();
  sub->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  sub->add_option("--out", o->out, "Output directory")->required();
  sub->add_option("--dtype", o->dtype, "Weight dtype: f32, bf16 or f16")->capture_default_str();
  sub->add_option("--init-std", o->std, "Standard deviation of the weight matrices")
      ->capture_default_str();
  return {sub, [o] {
            const auto dtype = dtype_from_cli(o->dtype);
            if (!dtype) fail("--dtype: unknown dtype '{}' (f32, bf16, f16)", o->dtype);
            ModelConfig c =
                is_preset(o->config) ? preset_config(o->config) : read_config(fs::path(o->config));
            ParamLayout layout(c);
            const std::unique_ptr<Backend> be =
                make_backend(DeviceRequest::kCpu, ComputeDType::kFp32);
            ParamStore store(layout, *be, /*with_grads=*/false);
            init_params(store, layout, o->seed, o->std);
            save_hf_checkpoint(o->out, c, layout, store, *dtype);
            KILN_LOG_INFO("wrote {} ({:.1f}M parameters, seed {})", o->out,
                          parameter_count(c) / 1e6, o->seed);
            return 0;
          }};
}

}  // namespace kiln::cli
