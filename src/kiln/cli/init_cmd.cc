// kiln init: a randomly initialised checkpoint of any family (a preset or a config.json) in Hugging
// Face layout; with --tokenizer, sized for that tokenizer and carrying its files, its family's
// chat template (or the tokenizer's own, or --template's) and special tokens
// (model/tokenizer_fit.h), so it trains and chats with it as it is.
#include <optional>

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/log.h"
#include "kiln/cli/chat_options.h"
#include "kiln/cli/commands.h"
#include "kiln/hub/model_location.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/model/init.h"
#include "kiln/model/layout.h"
#include "kiln/model_files/hf_checkpoint.h"
#include "kiln/model_files/hf_model_files.h"
#include "kiln/model_files/tokenizer_fit.h"
#include "kiln/text/tokenizer.h"

namespace kiln::cli {

namespace {

// config.json (the special ids) and generation_config.json, then the tokenizer files beside them
// (tokenizer.json byte for byte, tokenizer_config.json with the chat template), then the weights
// last, so a directory whose weights are complete has everything else. `chat_template`:
// --template, or "". Returns the template's name, or "the tokenizer's own".
std::string save_with_tokenizer(const fs::path& out, const ModelConfig& c,
                                const ParamLayout& layout, const ParamStore& store, DType dtype,
                                const Tokenizer& tok, const fs::path& tok_json,
                                const std::string& chat_template) {
  const FittedTemplate tmpl = fitted_chat_template(c.family, tok_json, chat_template);
  Json config = config_to_json(c, torch_dtype_name(dtype));
  const Json generation = fit_special_tokens(config, tok, tok_json, tmpl.tokens);
  fs::create_directories(out);
  write_file_atomic(out / "config.json", config.dump(2) + "\n");
  // HfModelFiles copies these two from `out`, the base it reads.
  write_file_atomic(out / "generation_config.json", generation.dump(2) + "\n");
  HfModelFiles::read(out, tok_json, tmpl.setting).write(out, torch_dtype_name(dtype));
  save_hf_weights_streaming(
      out, layout, [&](int u, float* dst) { store.read_unit(u, dst); }, dtype);
  return tmpl.setting.empty() ? "the tokenizer's own" : tmpl.setting;
}

}  // namespace

Command add_init(CLI::App& app) {
  struct Opts {
    std::string config, out, dtype = "f32", tokenizer, chat_template;
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
  sub->add_option("--tokenizer", o->tokenizer,
                  "A tokenizer.json (or a directory with one): vocab_size becomes its vocabulary "
                  "rounded up to a multiple of 128, its files are copied into --out with the "
                  "chat template of the model's family (unless the tokenizer has its own), and "
                  "bos/eos ids and generation_config.json are that template's models'");
  add_template_option(sub, o->chat_template,
                      "With --tokenizer: the chat template --out carries, whatever the tokenizer's "
                      "or the family's");
  return {sub, [o] {
            const auto dtype = dtype_from_cli(o->dtype);
            if (!dtype) fail("--dtype: unknown dtype '{}' (f32, bf16, f16)", o->dtype);
            ModelConfig c =
                is_preset(o->config) ? preset_config(o->config) : read_config(fs::path(o->config));
            if (!o->chat_template.empty() && o->tokenizer.empty()) {
              fail("--template needs --tokenizer (without one --out has no chat template)");
            }
            std::optional<Tokenizer> tok;
            fs::path tok_json;
            if (!o->tokenizer.empty()) {
              tok_json = tokenizer_json_path(
                  {}, locate_model(o->tokenizer, {"--tokenizer", "", false}).dir);
              tok = Tokenizer::load(tok_json);
              c.vocab_size = fitted_vocab_size(tok->vocab_size());
            }
            ParamLayout layout(c);
            const std::unique_ptr<Backend> be =
                make_backend(DeviceRequest::kCpu, ComputeDType::kFp32);
            ParamStore store(layout, *be, /*with_grads=*/false);
            init_params(store, layout, o->seed, o->std);
            if (tok) {
              const std::string chat = save_with_tokenizer(o->out, c, layout, store, *dtype, *tok,
                                                           tok_json, o->chat_template);
              KILN_LOG_INFO(
                  "wrote {} ({:.1f}M parameters, seed {}; vocab_size {} for {}; chat template {})",
                  o->out, parameter_count(c) / 1e6, o->seed, c.vocab_size, tok_json.string(), chat);
            } else {
              save_hf_checkpoint(o->out, c, layout, store, *dtype);
              KILN_LOG_INFO("wrote {} ({:.1f}M parameters, seed {})", o->out,
                            parameter_count(c) / 1e6, o->seed);
            }
            return 0;
          }};
}

}  // namespace kiln::cli
