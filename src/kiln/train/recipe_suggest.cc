#include "kiln/train/recipe_suggest.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "kiln/train/recipe.h"

namespace kiln {

namespace {

// Other tools' names for kiln's keys (ForeignKey); docs/recipe.md lists them.
constexpr const char* kHfTrainer = "the Hugging Face Trainer's";
constexpr const char* kHfAxolotl = "the Hugging Face Trainer's and axolotl's";
const ForeignKey kForeignKeys[] = {
    {"r", "PEFT's", "lora.rank", ""},
    {"lora_r", "axolotl's", "lora.rank", ""},
    {"lora_rank", "torchtune's", "lora.rank", ""},
    {"lora_alpha", "PEFT's, torchtune's and axolotl's", "lora.alpha", ""},
    {"lora_dropout", "PEFT's, torchtune's and axolotl's", "lora.dropout", ""},
    {"target_modules", "PEFT's", "lora.targets", ""},
    {"lora_target_modules", "axolotl's", "lora.targets", ""},
    {"lora_attn_modules", "torchtune's", "lora.targets", ""},
    {"use_rslora", "PEFT's", "lora.rslora", ""},
    {"base_model", "axolotl's", "model.path", ""},
    {"sequence_len", "axolotl's", "data.seq_len", ""},
    {"max_seq_len", "torchtune's", "data.seq_len", ""},
    {"max_seq_length", "TRL's", "data.seq_len", ""},
    {"sample_packing", "axolotl's", "data.pack", ""},
    {"packed", "torchtune's", "data.pack", ""},
    {"packing", "TRL's", "data.pack", ""},
    {"train_on_inputs", "axolotl's", "data.train_on_prompt", ""},
    {"chat_template", "axolotl's", "data.template", ""},
    {"val_set_size", "axolotl's", "data.eval_split", "a fraction of data.train"},
    {"learning_rate", kHfAxolotl, "optimizer.lr", ""},
    {"warmup_ratio", kHfAxolotl, "schedule.warmup_steps", "a number of steps, not a fraction"},
    {"num_warmup_steps", "torchtune's", "schedule.warmup_steps", ""},
    {"lr_scheduler_type", kHfTrainer, "schedule.name", ""},
    {"lr_scheduler", "axolotl's", "schedule.name", ""},
    {"gradient_accumulation_steps", "the Hugging Face Trainer's, torchtune's and axolotl's",
     "train.grad_accum_steps", ""},
    {"batch_size", "torchtune's", "train.micro_batch_size", "rows per rank"},
    {"per_device_train_batch_size", kHfTrainer, "train.micro_batch_size", ""},
    {"num_train_epochs", kHfTrainer, "train.epochs", ""},
    {"num_epochs", "axolotl's", "train.epochs", ""},
    {"max_grad_norm", kHfAxolotl, "train.grad_clip", ""},
    {"clip_grad_norm", "torchtune's", "train.grad_clip", ""},
    {"gradient_checkpointing", kHfAxolotl, "train.activation_checkpointing", ""},
    {"enable_activation_checkpointing", "torchtune's", "train.activation_checkpointing", ""},
    {"logging_steps", kHfAxolotl, "train.log_every", ""},
    {"log_every_n_steps", "torchtune's", "train.log_every", ""},
    {"resume_from_checkpoint", kHfAxolotl, "train.resume", ""},
    {"output_dir", kHfAxolotl, "output.dir", ""},
    {"save_steps", kHfAxolotl, "checkpoint.every_steps", ""},
    {"save_total_limit", kHfAxolotl, "checkpoint.keep_last", ""},
    {"eval_steps", kHfAxolotl, "eval.every_steps", ""},
};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// "optimizer.lr" -> "lr"; "lr" -> "lr".
std::string leaf_of(const std::string& key) { return key.substr(key.rfind('.') + 1); }

}  // namespace

std::span<const ForeignKey> foreign_recipe_keys() { return kForeignKeys; }

std::string unknown_key_hint(const std::string& key, const std::vector<std::string>& candidates) {
  const std::string leaf = leaf_of(key);
  for (const ForeignKey& f : kForeignKeys) {
    if (leaf != f.name) continue;
    return fmt::format(" ({} name; kiln's is '{}'{}{})", f.whose, f.kiln_key, *f.note ? ", " : "",
                       f.note);
  }
  // The candidate whose `part` is nearest `s`, if within `slack` edits.
  const auto nearest = [](const std::string& s, const std::vector<std::string>& among, auto part,
                          size_t slack) -> const std::string* {
    const std::string* best = nullptr;
    size_t best_d = std::numeric_limits<size_t>::max();
    for (const std::string& c : among) {
      const size_t d = edit_distance(s, part(c));
      if (d < best_d) best_d = d, best = &c;
    }
    return best_d <= slack ? best : nullptr;
  };
  const auto did_you_mean = [](const std::string& k) {
    return fmt::format(" (did you mean '{}'?)", k);
  };
  const auto whole = [](const std::string& c) { return c; };
  if (const std::string* k = nearest(key, candidates, whole, std::max<size_t>(2, key.size() / 4))) {
    return did_you_mean(*k);
  }
  const std::vector<std::string>& keys = recipe_keys();
  for (const std::string& k : keys) {
    if (leaf_of(k) == leaf) return did_you_mean(k);
  }
  if (const std::string* k = nearest(leaf, keys, leaf_of, std::max<size_t>(1, leaf.size() / 4))) {
    return did_you_mean(*k);
  }
  return "";
}

}  // namespace kiln
