// kiln eval --model DIR [--adapter A] --data FILE [--format F --tokenizer T] [--json]: mean
// next-token loss over a dataset in any data format (loss where training would take it; the format
// inferred from the first record when not given). DIR is a Hugging Face model directory, a run
// directory or a sharded checkpoint (<run>/checkpoints/step-N, read unit by unit; a LoRA run's:
// its recipe's base with its adapters); A a PEFT adapter directory or a LoRA run or checkpoint
// applied to it (train/checkpoint_model.h).
#include <cstdio>
#include <optional>

#include "kiln/base/error.h"
#include "kiln/base/json.h"
#include "kiln/cli/chat_options.h"
#include "kiln/cli/commands.h"
#include "kiln/cli/model_options.h"
#include "kiln/data/sampler.h"
#include "kiln/data/text_dataset.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/model/decoder.h"
#include "kiln/model_files/adapted_model.h"
#include "kiln/text/chat_template.h"
#include "kiln/train/checkpoint_model.h"

namespace kiln::cli {

Command add_eval(CLI::App& app) {
  struct Opts {
    std::string model, adapter, data, format, tokenizer, chat_template, enable_thinking;
    bool json = false, allow_other_base = false;
    int seq_len = 2048;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("eval", "Mean next-token loss of a model over a dataset");
  add_model_options(sub, o->model, o->adapter, o->allow_other_base);
  sub->add_option("--data", o->data, "JSONL file in --format")->required();
  sub->add_option("--format", o->format,
                  "Data format: " + data_format_choices() +
                      " (docs/recipe.md); default: inferred from the first record's fields");
  sub->add_option("--tokenizer", o->tokenizer,
                  "tokenizer.json or a directory holding one, for the text formats (default: "
                  "--model)");
  add_chat_template_options(sub, o->chat_template, o->enable_thinking,
                            "For the chat formats: ", "the model's own, when kiln knows it");
  sub->add_option("--seq-len", o->seq_len, "Truncate examples to this many tokens")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 20));
  sub->add_flag("--json", o->json, "Print {\"loss\": ..., \"tokens\": ...}");
  return {sub, [o] {
            std::optional<DataFormat> format;
            if (!o->format.empty() && !(format = parse_data_format(o->format))) {
              fail("--format: unknown data format '{}' ({})", o->format, data_format_choices());
            }
            const ModelSource src = open_model_source(o->model, o->adapter);
            check_source_base(src, o->allow_other_base);
            const fs::path& dir = src.dir;
            const AdaptedModel& m = src.model;
            const ModelConfig& c = m.config;
            const std::unique_ptr<Backend> be =
                make_backend(DeviceRequest::kAuto, ComputeDType::kFp32);
            Decoder model(c, *be, m.inference_lora());
            ParamStore store(model.layout(), *be, /*with_grads=*/false);
            load_model_source(src, model.layout(), store);
            DataOptions d;
            d.path = o->data;
            d.format = format ? *format : infer_file_format(o->data, "--format");
            d.tokenizer = o->tokenizer.empty() ? dir : fs::path(o->tokenizer);
            d.seq_len = o->seq_len;
            d.chat_template = o->chat_template;
            d.template_key = "--template";
            d.thinking_key = "--enable-thinking";
            if (!o->enable_thinking.empty()) d.enable_thinking = o->enable_thinking == "true";
            d.use_cache = false;  // evaluation sets are small; leave no files behind
            d.verbose = false;
            const TokenizedDataset data = load_dataset(d, c.vocab_size);
            // Same averaging as training: the mean over every predicted token of the file.
            double loss_sum = 0;
            int64_t targets = 0;
            Batch b;
            for (size_t i = 0; i < data.size(); ++i) {
              const ExampleView ex = data.example(i);
              b.resize(1, static_cast<int>(ex.size()));
              fill_row(b, 0, ex);
              loss_sum += model.forward(b, store);
              targets += b.num_targets();
            }
            if (targets == 0) fail("{}: no predicted tokens (every label masked?)", o->data);
            const double loss = loss_sum / static_cast<double>(targets);
            if (o->json) {
              std::printf("%s\n", Json{{"loss", loss}, {"tokens", targets}}.dump().c_str());
            } else {
              std::printf("loss %.6f over %lld predicted tokens (%zu examples)\n", loss,
                          static_cast<long long>(targets), data.size());
            }
            return 0;
          }};
}

}  // namespace kiln::cli
