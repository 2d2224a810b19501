// kiln eval --model DIR [--adapter A] --data FILE [--format F --tokenizer T] [--json]: mean
// next-token loss over a dataset in any data format (loss where training would take it; the format
// inferred from the first record when not given). DIR is a Hugging Face model directory, a run
// directory or a sharded checkpoint (<run>/checkpoints/step-N, read unit by unit; a LoRA run's:
// its recipe's base with its adapters); A a PEFT adapter directory or a LoRA run or checkpoint
// applied to it (train/checkpoint_model.h). With --format preference: the preference loss
// (--loss-type, --beta, ...) and TRL's six metrics over the file's pairs, against --reference or
// the model's base with its adapters off.
#include <algorithm>
#include <cstdio>
#include <optional>

#include "kiln/base/error.h"
#include "kiln/base/json.h"
#include "kiln/cli/chat_options.h"
#include "kiln/cli/commands.h"
#include "kiln/cli/model_options.h"
#include "kiln/data/preference_pairs.h"
#include "kiln/data/sampler.h"
#include "kiln/data/text_dataset.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/model/decoder.h"
#include "kiln/model_files/adapted_model.h"
#include "kiln/text/chat_template.h"
#include "kiln/train/checkpoint_model.h"
#include "kiln/train/preference_config.h"

namespace kiln::cli {

namespace {

struct Opts {
  std::string model, adapter, data, format, tokenizer, chat_template, enable_thinking;
  bool json = false, allow_other_base = false;
  int seq_len = 2048;
  // --format preference: the loss's settings (the recipe's dpo section) and the reference.
  DpoConfig dpo;
  std::string loss_type = "sigmoid", reference;
};

// --format preference: the mean preference loss and TRL's metrics over the file's pairs, one
// pair (two rows) a forward; the reference's log-probabilities from --reference's weights, or,
// for a model with adapters, from its base with the adapters off.
int eval_preference(const Opts& o, const ModelSource& src, const Backend& be, Decoder& model,
                    ParamStore& store, const TokenizedDataset& data) {
  DpoConfig dpo = o.dpo;
  dpo.loss_type = parse_named(kPreferenceLossNames, o.loss_type, "--loss-type");
  const bool adapters = src.model.adapter.has_value();
  std::optional<ParamStore> reference;
  if (dpo.uses_reference() && !adapters) {
    if (o.reference.empty()) {
      fail(
          "--reference: a model without adapters needs a reference model to evaluate "
          "preference pairs against (a Hugging Face directory of the same shape)");
    }
    const ModelSource ref = open_model_source(o.reference, "");
    reference.emplace(model.layout(), be, /*with_grads=*/false);
    load_model_source(ref, model.layout(), *reference);
  }
  DeviceBuffer<double> seq(be, 4), ref_seq(be, 4), sums(be, kNumPreferenceSums);
  Batch b;
  for (size_t i = 0; i < data.size(); ++i) {
    const auto [chosen, rejected] = pair_sequences(data.example(i));
    b.resize(2, static_cast<int>(std::max(chosen.size(), rejected.size())));
    fill_example_rows(b, 0, data.example(i), 2);
    be.fill_zero(seq.data(), 4 * sizeof(double));
    be.fill_zero(ref_seq.data(), 4 * sizeof(double));
    model.sequence_logps(b, store, seq.data(), false);
    if (dpo.uses_reference()) {
      model.sequence_logps(b, reference ? *reference : store, ref_seq.data(), adapters);
    }
    be.preference_loss(nullptr, sums.data(), seq.data(), ref_seq.data(), nullptr, 2, dpo.terms(1.0),
                       0, 1);
  }
  std::vector<double> host(kNumPreferenceSums);
  be.copy_to_host(host.data(), sums.data(), host.size() * sizeof(double));
  be.synchronize();
  const double pairs = host[kPrefPairs];
  if (pairs == 0) fail("{}: no preference pair to evaluate", o.data);
  Json out{{"loss", host[kPrefLoss] / pairs}, {"pairs", static_cast<int64_t>(pairs)}};
  for (const PreferenceMetric& m : kPreferenceMetrics) out[m.name] = host[m.sum] / pairs;
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("loss %.6f over %lld pairs; rewards/accuracies %.4f, rewards/margins %.6f\n",
                host[kPrefLoss] / pairs, static_cast<long long>(pairs), host[kPrefAccuracy] / pairs,
                host[kPrefMargin] / pairs);
  }
  return 0;
}

}  // namespace

Command add_eval(CLI::App& app) {
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
  sub->add_option(
         "--loss-type", o->loss_type,
         "--format preference: " + allowed_names(kPreferenceLossNames) + " (dpo.loss_type)")
      ->capture_default_str();
  sub->add_option("--beta", o->dpo.beta, "--format preference: dpo.beta")->capture_default_str();
  sub->add_option("--label-smoothing", o->dpo.label_smoothing,
                  "--format preference: dpo.label_smoothing")
      ->capture_default_str();
  sub->add_option("--simpo-gamma", o->dpo.simpo_gamma, "--format preference: dpo.simpo_gamma")
      ->capture_default_str();
  sub->add_option("--reference", o->reference,
                  "--format preference: the reference model (default: a model's base with its "
                  "adapters off)");
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
            if (d.format == DataFormat::kPreference) {
              return eval_preference(*o, src, *be, model, store, data);
            }
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
