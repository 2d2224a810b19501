#include "kiln/train/recipe.h"

#include <yaml-cpp/yaml.h>

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/hub/model_location.h"
#include "kiln/train/recipe_reader.h"
#include "kiln/train/recipe_schema.h"

namespace kiln {

namespace {

std::vector<std::string> key_names(bool identity_only) {
  std::vector<std::string> out;
  for (const RecipeKey& k : recipe_schema()) {
    if (!identity_only || k.defines_run) out.push_back(k.name);
  }
  return out;
}

// Every row read in the schema's order; with a dpo section train.micro_batch_size defaults to 2
// (one pair). The lora section's defaults are decided here: rank 8,
// alpha 16, dropout 0 (LoraConfig's), every projection (PEFT's own default is q_proj and v_proj;
// kiln adapts all seven), no rslora; without a lora section (nullopt) the run is full
// fine-tuning.
Recipe read_recipe(RecipeReader& in) {
  Recipe r;
  r.lora.emplace();
  r.lora->targets = resolve_lora_targets({kAllLinear}, "lora.targets");
  r.dpo.emplace();
  for (const RecipeKey& k : recipe_schema()) k.read(in, r);
  if (!in.has_section("lora")) r.lora.reset();
  if (!in.has_section("dpo")) r.dpo.reset();
  // A preference pair takes two rows: a dpo run's micro-batch is one pair unless set.
  if (r.dpo && in.find("train.micro_batch_size") == nullptr) r.train.micro_batch_size = 2;
  return r;
}

// The entry of the first key of `keys` the recipe sets, for an error about their combination.
const Entry& entry_of(RecipeReader& in, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    if (const Entry* e = in.find(k)) return *e;
  }
  return in.require(*keys.begin());
}

// A dpo section trains on preference data only, and preference data trains only with one.
void validate_preference(const Recipe& r, RecipeReader& in) {
  bool any = false, all = true;
  for (const Recipe::TrainFile& f : r.data.train) {
    const bool pref = train_file_format(r, f) == DataFormat::kPreference;
    any = any || pref;
    all = all && pref;
  }
  if (!r.dpo) {
    if (any) {
      RecipeReader::bad(entry_of(in, {"data.format", "data.train"}), "data.format",
                        "preference data trains with a dpo section (add dpo: {} for DPO with "
                        "TRL's defaults)");
    }
    return;
  }
  if (!all || (!r.data.eval.empty() && r.data.format != DataFormat::kPreference)) {
    RecipeReader::bad(entry_of(in, {"data.format", "data.train"}), "data.format",
                      "a dpo section trains on pairs: every data.train file (and data.eval) "
                      "must be in format preference");
  }
  if (r.lora && r.dpo->reference != kReferenceBase) {
    RecipeReader::bad(in.require("dpo.reference"), "dpo.reference",
                      "with a lora section the reference is the base with the adapters off "
                      "(dpo.reference: base)");
  }
  if (r.data.pack) {
    RecipeReader::bad(in.require("data.pack"), "data.pack",
                      "packing preference pairs is not supported yet (set data.pack: false)");
  }
  if (r.train.micro_batch_size % 2 != 0) {
    RecipeReader::bad(entry_of(in, {"train.micro_batch_size", "dpo.loss_type"}),
                      "train.micro_batch_size",
                      fmt::format("{} rows cannot hold whole pairs: a preference pair takes two "
                                  "rows (its chosen and rejected sequences); use an even number",
                                  r.train.micro_batch_size));
  }
}

// The checks across keys, once each key's own have passed; each error names the entry of the key
// it is told under.
void validate(const Recipe& r, RecipeReader& in) {
  if (!r.model.adapter.empty() && !r.lora) {
    RecipeReader::bad(
        *in.find("model.adapter"), "model.adapter",
        "continues training a PEFT adapter, but the recipe has no lora section (add one whose "
        "rank, alpha, targets and rslora match the adapter's adapter_config.json)");
  }
  if (r.data.eval_split > 0 && !r.data.eval.empty()) {
    RecipeReader::bad(*in.find("data.eval_split"), "data.eval_split",
                      fmt::format("holds out training data for evaluation, but data.eval ({}) is "
                                  "set too: set one of them",
                                  r.data.eval));
  }
  validate_preference(r, in);
  const int64_t tokens =
      int64_t{r.train.grad_accum_steps} * r.train.micro_batch_size * int64_t{r.data.seq_len};
  if (tokens > kMaxStepTokens) {
    const Entry* e = in.find("train.grad_accum_steps");
    if (e == nullptr) e = in.find("train.micro_batch_size");
    if (e == nullptr) e = in.find("data.seq_len");
    fail(
        "{}: train.grad_accum_steps {} x train.micro_batch_size {} x data.seq_len {} = {} tokens "
        "in one step; at most {} (a step holds every micro-batch in memory, 16 bytes a token, "
        "to count its targets first): train.grad_accum_steps may be at most {} here",
        e != nullptr ? e->where : in.what(), r.train.grad_accum_steps, r.train.micro_batch_size,
        r.data.seq_len, tokens, kMaxStepTokens,
        kMaxStepTokens / (int64_t{r.train.micro_batch_size} * r.data.seq_len));
  }
}

// model.path and model.adapter: a local path wins; else a hub id from the Hugging Face cache
// (hub/model_location.h), downloaded with model.download. Found nowhere (and not downloaded):
// the local path, and the rule kept for the preflight's error (a recipe is also read where its
// model need not exist: prepare-data, tests). Once the recipe has passed every check, so a
// recipe with a bad key starts no download.
void locate_models(RecipeReader& in, Recipe& r) {
  const auto locate = [&](const std::string& key, const std::string& local,
                          const std::string& rev) {
    ModelLocation at{local, "", ""};
    std::error_code ec;  // a path the filesystem refuses (too long, say) is simply not there
    if (!fs::exists(at.dir, ec)) {
      try {
        const std::string spec = RecipeReader::text(*in.find(key), key);
        ModelLocation hub = locate_model(spec, {key, rev, r.model.download});
        if (hub.from_hub()) at = std::move(hub);
      } catch (const Error& err) {
        if (r.model.download) throw;
        r.model.hub_note = err.what();
      }
    }
    return at;
  };
  const ModelLocation base = locate("model.path", r.model.path, r.model.revision);
  r.model.path = base.dir.string();
  r.model.hub_id = base.repo_id;
  if (base.from_hub()) r.model.revision = base.dir.filename().string();  // the commit read
  if (!r.model.adapter.empty()) {
    r.model.adapter = locate("model.adapter", r.model.adapter, "").dir.string();
  }
}

}  // namespace

const std::vector<std::string>& recipe_keys() {
  static const std::vector<std::string> keys = key_names(false);
  return keys;
}

const std::vector<std::string>& run_identity_keys() {
  static const std::vector<std::string> keys = key_names(true);
  return keys;
}

const char* recipe_path_rule() {
  return "a relative path in a recipe file is relative to the file's folder, one on the command "
         "line to the working directory";
}

DataFormat train_file_format(const Recipe& r, const Recipe::TrainFile& f) {
  return f.format.value_or(r.data.format);
}

Recipe parse_recipe(const std::string& yaml_text, const std::string& what, const fs::path& base_dir,
                    const std::vector<std::string>& overrides, RecipeUse use) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) fail("{}: malformed YAML: {}", what, e.msg);
    fail("{}:{}:{}: malformed YAML: {}", what, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  RecipeReader in(what, base_dir, use);
  in.add_document(root);
  for (const std::string& o : overrides) in.add_override(o);
  Recipe r = read_recipe(in);
  validate(r, in);
  locate_models(in, r);
  in.check_all_read();
  return r;
}

Recipe load_recipe(const fs::path& yaml_path, const std::vector<std::string>& overrides,
                   RecipeUse use) {
  return parse_recipe(read_file(yaml_path), yaml_path.string(),
                      fs::absolute(yaml_path).parent_path(), overrides, use);
}

// Section by section in the schema's order; no lora section for full fine-tuning, no dpo
// section for supervised fine-tuning.
std::string recipe_to_yaml(const Recipe& r) {
  YAML::Emitter out;
  out << YAML::Comment("Effective kiln recipe: every key, defaults included (docs/recipe.md).");
  out << YAML::BeginMap;
  std::string open;  // the section being written
  for (const RecipeKey& k : recipe_schema()) {
    const size_t dot = k.name.find('.');
    const std::string section = k.name.substr(0, dot);
    if ((section == "lora" && !r.lora) || (section == "dpo" && !r.dpo)) continue;
    if (section != open) {
      if (!open.empty()) out << YAML::EndMap;
      out << YAML::Key << section << YAML::Value << YAML::BeginMap;
      open = section;
    }
    out << YAML::Key << k.name.substr(dot + 1) << YAML::Value;
    k.write(out, r);
  }
  out << YAML::EndMap << YAML::EndMap;
  KILN_CHECK(out.good(), "recipe_to_yaml: {}", out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

}  // namespace kiln
