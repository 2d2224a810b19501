#include "kiln/train/preflight.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/data/formats.h"
#include "kiln/data/text_dataset.h"
#include "kiln/model/config.h"
#include "kiln/model/layout.h"
#include "kiln/model_files/base_fingerprint.h"
#include "kiln/model_files/peft_adapter.h"
#include "kiln/text/tokenizer.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/train_data.h"

namespace kiln {

namespace {

// `p` (resolved, links followed where they exist) is `dir` or lies inside it.
bool inside(const fs::path& p, const fs::path& dir) {
  std::error_code ec;
  const fs::path a = fs::weakly_canonical(fs::absolute(p), ec);
  const fs::path b = fs::weakly_canonical(fs::absolute(dir), ec);
  auto ai = a.begin();
  for (auto bi = b.begin(); bi != b.end(); ++bi, ++ai) {
    if (bi->empty()) continue;  // a trailing separator
    if (ai == a.end() || *ai != *bi) return false;
  }
  return true;
}

void check_readable_file(const std::string& key, const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) fail("{}: {} does not exist ({})", key, p.string(), recipe_path_rule());
  if (!fs::is_regular_file(p, ec)) fail("{}: {} is not a file", key, p.string());
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("{}: {} cannot be read", key, p.string());
}

// The first record of a JSONL file and its line number; nullopt when the file holds a JSON array
// (its records are found by parsing the whole array, which loading does) or only blank lines.
std::optional<std::pair<std::string, size_t>> first_record(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::string line;
  for (size_t n = 1; std::getline(f, line); ++n) {
    const size_t at = line.find_first_not_of(" \t\r\f\v");
    if (at == std::string::npos) continue;
    if (line[at] == '[') return std::nullopt;
    return std::make_pair(line, n);
  }
  return std::nullopt;
}

// model.adapter: a PEFT adapter directory that agrees with the lora section and fits the base.
// Adapters kiln recorded as trained on another base than model.path (kiln_base.json) may be
// continued on it, a choice a user can mean (a newer fine-tune of the same base), so that is a
// warning naming both, not an error.
void check_adapter(const Recipe& r, const ModelConfig& config) {
  const fs::path dir = r.model.adapter;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    if (!r.model.hub_note.empty()) fail("{}", r.model.hub_note);  // the hub id rule
    fail("model.adapter: {} is not a directory ({})", dir.string(), recipe_path_rule());
  }
  try {
    const PeftAdapterConfig adapter = read_peft_adapter_config(dir);
    check_peft_adapter_matches(adapter, *r.lora, (dir / kPeftConfigFile).string());
    read_peft_adapter(dir, config);  // every tensor named and shaped for this base
    check_adapter_base(adapter.base_fingerprint, "model.adapter " + dir.string(), r.model.path,
                       true, "training continues from them on model.path");
  } catch (const Error& e) {
    fail("model.adapter: {}", e.what());
  }
}

}  // namespace

std::string output_dir_in_use(const Recipe& r, const fs::path& newest) {
  return fmt::format(
      "output.dir {} already holds checkpoints (newest: {}): train.resume=auto continues that "
      "run, output.overwrite=true deletes them and starts over, or choose another output.dir",
      r.output.dir, newest.string());
}

std::optional<std::string> overwrite_deletes_input(const Recipe& r) {
  const fs::path run = r.output.dir;
  const std::vector<fs::path> deleted = {run / "checkpoints", run / "final"};
  std::vector<std::pair<std::string, std::string>> inputs = {{"model.path", r.model.path},
                                                             {"model.adapter", r.model.adapter},
                                                             {"data.tokenizer", r.data.tokenizer},
                                                             {"data.eval", r.data.eval},
                                                             {"data.cache_dir", r.data.cache_dir}};
  for (size_t i = 0; i < r.data.train.size(); ++i) {
    inputs.emplace_back(r.data.train.size() == 1 ? "data.train" : fmt::format("data.train[{}]", i),
                        r.data.train[i].path);
  }
  for (const auto& [key, path] : inputs) {
    if (path.empty()) continue;
    for (const fs::path& d : deleted) {
      if (!inside(path, d)) continue;
      return fmt::format(
          "output.overwrite=true would delete {} of the previous run, but {} {} is inside it: "
          "nothing was deleted (copy it elsewhere first, or train into another output.dir)",
          d.string(), key, path);
    }
  }
  return std::nullopt;
}

ModelConfig read_model_config(const Recipe& r) {
  std::error_code ec;
  const fs::path model = r.model.path;
  if (!fs::is_directory(model, ec)) {
    if (!r.model.hub_note.empty()) fail("{}", r.model.hub_note);  // the hub id rule
    fail("model.path: {} is not a directory ({})", model.string(), recipe_path_rule());
  }
  if (!fs::exists(model / "config.json", ec)) {
    fail("model.path: {} has no config.json (not a Hugging Face model directory)", model.string());
  }
  const ModelConfig config = read_config(model / "config.json");
  if (r.lora) r.lora->check_rank_fits(config, "lora.rank");
  return config;
}

// dpo.reference (a directory): a Hugging Face model whose every tensor has the policy's name and
// shape.
void check_reference(const Recipe& r, const ModelConfig& config) {
  if (!r.dpo || !r.dpo->uses_reference() || r.dpo->reference == kReferenceBase) return;
  const fs::path dir = r.dpo->reference;
  std::error_code ec;
  if (!fs::exists(dir / "config.json", ec)) {
    fail("dpo.reference: {} has no config.json (not a Hugging Face model directory)", dir.string());
  }
  const auto tensors = [](const ModelConfig& c) {
    std::vector<std::pair<std::string, std::vector<int64_t>>> out;
    const ParamLayout layout(c);
    for (const ParamUnit& u : layout.units()) {
      for (const ParamEntry& e : u.entries) out.emplace_back(e.name, e.shape);
    }
    return out;
  };
  const auto want = tensors(config);
  const auto got = tensors(read_config(dir / "config.json"));
  for (size_t i = 0; i < std::max(want.size(), got.size()); ++i) {
    if (i < want.size() && i < got.size() && want[i] == got[i]) continue;
    const auto describe = [](const auto& list, size_t k) {
      return k < list.size() ? fmt::format("{} {}", list[k].first, fmt::join(list[k].second, "x"))
                             : std::string("nothing");
    };
    fail(
        "dpo.reference: {}/config.json is not a model of the policy's shape: it has {} where "
        "model.path {} has {}",
        dir.string(), describe(got, i), r.model.path, describe(want, i));
  }
}

void preflight_checks(const Recipe& r) {
  std::error_code ec;
  const ModelConfig config = read_model_config(r);
  check_context_length(r, config, /*lead=*/false);  // the trainer's rank 0 warns when allowed
  if (!r.model.adapter.empty()) check_adapter(r, config);
  check_reference(r, config);

  // Each data.train file in its own format, data.eval in data.format.
  struct File {
    std::string key;
    DataOptions options;
  };
  std::vector<File> files;
  for (size_t i = 0; i < r.data.train.size(); ++i) {
    files.push_back({r.data.train.size() == 1 ? "data.train" : fmt::format("data.train[{}]", i),
                     data_options(r, r.data.train[i])});
  }
  if (!r.data.eval.empty()) {
    files.push_back({"data.eval", data_options(r, r.data.eval, r.data.format)});
  }
  std::optional<Tokenizer> tokenizer;
  for (const File& f : files) {
    if (f.options.format == DataFormat::kTokens || tokenizer) continue;
    const fs::path tj = tokenizer_json_path(f.options.tokenizer);
    // Pre-tokenized preference pairs need none (a text record then says so).
    if (f.options.format == DataFormat::kPreference && !fs::exists(tj, ec)) continue;
    if (!fs::exists(tj, ec)) {
      fail("{}: {} does not exist, and {}'s format {} needs a tokenizer",
           r.data.tokenizer.empty() ? "model.path" : "data.tokenizer", tj.string(), f.key,
           data_format_name(f.options.format));
    }
    tokenizer.emplace(Tokenizer::load(f.options.tokenizer));
  }
  for (const File& f : files) {
    const fs::path& path = f.options.path;
    check_readable_file(f.key, path);
    if (r.data.skip_bad_lines) continue;  // a bad first line is skipped, not an error
    if (const auto first = first_record(path)) {
      const LineEncoder encoder(f.options.format, tokenizer ? &*tokenizer : nullptr,
                                config.vocab_size, r.data.train_on_prompt,
                                data_chat_template(f.options),
                                {.enable_thinking = f.options.enable_thinking});
      // Throws "<file>:<line>: <problem>" naming the field, as loading would.
      encoder.encode(first->first, fmt::format("{}:{}", path.string(), first->second),
                     {first->second, 1});
    }
  }

  if (r.train.resume.mode == ResumeMode::kCheckpoint) {
    const fs::path ckpt = r.train.resume.checkpoint;
    if (!fs::is_regular_file(ckpt / "manifest.json", ec)) {
      fail("train.resume: {} is not a checkpoint (no manifest.json)", ckpt.string());
    }
  }
  if (r.train.resume.mode == ResumeMode::kNone) {
    if (const auto latest = latest_checkpoint(fs::path(r.output.dir) / "checkpoints")) {
      if (!r.output.overwrite) fail("{}", output_dir_in_use(r, latest->dir));
      if (const auto clash = overwrite_deletes_input(r)) fail("{}", *clash);
    }
  }
}

}  // namespace kiln
