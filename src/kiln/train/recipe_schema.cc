#include "kiln/train/recipe_schema.h"

#include <limits>

#include "kiln/data/formats.h"
#include "kiln/text/chat_template.h"

namespace kiln {

namespace {

using Emitter = YAML::Emitter;

// Whether a key defines the run (RecipeKey::defines_run).
constexpr bool kRun = true;
constexpr bool kNotRun = false;

// The ranges values are checked against, each said once.
constexpr Rule<int64_t> kPositive{"> 0", [](int64_t v) { return v > 0; }};
constexpr Rule<int64_t> kNonNegative{">= 0", [](int64_t v) { return v >= 0; }};
constexpr Rule<double> kFraction{"in [0, 1)", [](double v) { return v >= 0 && v < 1; }};
// The optimizer's arithmetic is fp32, as the parameters are: a value fp32 cannot hold (lr 1e39
// is finite as a double, infinite as a float) would make every weight non-finite.
constexpr double kF32Max = std::numeric_limits<float>::max();
constexpr double kF32MinNormal = std::numeric_limits<float>::min();
constexpr Rule<double> kPositiveF32{"in (0, 3.4028235e+38] (a float32)",
                                    [](double v) { return v > 0 && v <= kF32Max; }};

// fmt's shortest representation round-trips exactly; a '.' is added ("0.0", "1.0e-08") so that
// YAML 1.1 readers such as PyYAML see a float too.
std::string number(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".ni") == std::string::npos) {
    size_t e = s.find('e');
    s.insert(e == std::string::npos ? s.size() : e, ".0");
  }
  return s;
}

using Model = Recipe::Model;
using Data = Recipe::Data;
using Train = Recipe::Train;
using Dist = Recipe::Dist;

// A value's place in a Recipe, recipe.*section.*member, for reading (Recipe&) and writing (const
// Recipe&) alike.
template <typename S, typename T>
auto at(S Recipe::*section, T S::*member) {
  return [=](auto& r) -> auto& { return (r.*section).*member; };
}
// The same in the lora section, which the reader and writer only touch when it is present.
template <typename T>
auto lora_at(T LoraConfig::*member) {
  return [=](auto& r) -> auto& { return (*r.lora).*member; };
}

// The same in the dpo section.
template <typename T>
auto dpo_at(T DpoConfig::*member) {
  return [=](auto& r) -> auto& { return (*r.dpo).*member; };
}

// The kinds of row; `field` is a value's place, from at(), lora_at() or dpo_at().
template <typename Field>
RecipeKey flag(const char* name, bool run, Field field) {
  return {name, run, [=](RecipeReader& in, Recipe& r) { in.boolean(name, field(r)); },
          [=](Emitter& out, const Recipe& r) { out << field(r); }};
}

template <typename Field>
RecipeKey integer(const char* name, bool run, Rule<int64_t> rule, Field field) {
  return {name, run, [=](RecipeReader& in, Recipe& r) { in.integer(name, field(r), rule); },
          [=](Emitter& out, const Recipe& r) { out << field(r); }};
}

template <typename Field>
RecipeKey real(const char* name, bool run, Rule<double> rule, Field field) {
  return {name, run, [=](RecipeReader& in, Recipe& r) { in.real(name, field(r), rule); },
          [=](Emitter& out, const Recipe& r) { out << number(field(r)); }};
}

// One of a name table's values (base/named_values.h), the enum of the layer that owns it.
template <typename E, size_t N, typename Field>
RecipeKey named(const char* name, bool run, const std::array<Named<E>, N>& table, Field field) {
  return {name, run, [=, &table](RecipeReader& in, Recipe& r) { in.named(name, field(r), table); },
          [=, &table](Emitter& out, const Recipe& r) { out << name_of(table, field(r)); }};
}

// A path, or "" (no value, or "") for none.
template <typename Field>
RecipeKey optional_path(const char* name, bool run, Field field) {
  return {name, run, [=](RecipeReader& in, Recipe& r) { in.optional_path(name, field(r)); },
          [=](Emitter& out, const Recipe& r) { out << YAML::DoubleQuoted << field(r); }};
}

// A path the recipe must give.
template <typename Field>
RecipeKey required_path(const char* name, bool run, Field field) {
  return {name, run,
          [=](RecipeReader& in, Recipe& r) { field(r) = in.path(in.require(name), name); },
          [=](Emitter& out, const Recipe& r) { out << YAML::DoubleQuoted << field(r); }};
}

// A data format's name or alias (data/formats.h holds the one list).
DataFormat format_of(const Entry& e, const std::string& key) {
  const std::string s = RecipeReader::text(e, key);
  const auto format = parse_data_format(s);
  if (!format) {
    RecipeReader::bad(e, key,
                      fmt::format("invalid value '{}' (valid: {})", s, data_format_choices()));
  }
  return *format;
}

// One data.train entry: a path, or a map {path, format, weight}.
Recipe::TrainFile train_file(const RecipeReader& in, const Entry& e, const std::string& key) {
  Recipe::TrainFile f;
  if (!e.node.IsMap()) {
    f.path = in.path(e, key);
    return f;
  }
  for (const auto& kv : e.node) {
    const std::string field = kv.first.IsScalar() ? kv.first.Scalar() : describe(kv.first);
    if (field != "path" && field != "format" && field != "weight") {
      RecipeReader::bad(e, key,
                        fmt::format("unknown field '{}' (an entry is a path or a map of path, "
                                    "format and weight)",
                                    field));
    }
  }
  const YAML::Node path = e.node["path"];
  if (!path) {
    RecipeReader::bad(e, key, "missing 'path' (an entry is a path or {path, format, weight})");
  }
  f.path = in.path(Entry{path, e.where, e.from_override}, key + ".path");
  if (const YAML::Node n = e.node["format"])
    f.format = format_of(Entry{n, e.where}, key + ".format");
  if (const YAML::Node n = e.node["weight"]) {
    const Entry w{n, e.where};
    f.weight = RecipeReader::to_double(w, key + ".weight");
    if (!(f.weight > 0 && f.weight <= 1000)) {
      RecipeReader::bad(w, key + ".weight",
                        fmt::format("must be in (0, 1000], got {}", n.Scalar()));
    }
  }
  return f;
}

// data.train: one entry or a list of them; required for training, not for a memory plan.
void read_train_files(RecipeReader& in, Recipe& r) {
  const std::string key = "data.train";
  const Entry* found = in.use() == RecipeUse::kTrain ? &in.require(key) : in.find(key);
  if (!found) return;
  const Entry& e = *found;
  if (!e.node.IsSequence()) {
    r.data.train = {train_file(in, e, key)};
    return;
  }
  if (e.node.size() == 0) {
    RecipeReader::bad(e, key, "expected a file or a list of files, got an empty list");
  }
  for (size_t i = 0; i < e.node.size(); ++i) {
    Entry item{e.node[i], e.where, e.from_override};
    r.data.train.push_back(train_file(in, item, fmt::format("{}[{}]", key, i)));
  }
}

// A plain path where the entry is one, else {path, format, weight}.
void write_train_files(Emitter& out, const Recipe& r) {
  const auto train_file = [&](const Recipe::TrainFile& f) {
    if (!f.format && f.weight == 1.0) {
      out << YAML::DoubleQuoted << f.path;
      return;
    }
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "path" << YAML::Value << YAML::DoubleQuoted << f.path;
    if (f.format) {
      out << YAML::Key << "format" << YAML::Value << std::string(data_format_name(*f.format));
    }
    out << YAML::Key << "weight" << YAML::Value << number(f.weight);
    out << YAML::EndMap;
  };
  if (r.data.train.size() == 1) {
    train_file(r.data.train[0]);
    return;
  }
  out << YAML::BeginSeq;
  for (const Recipe::TrainFile& f : r.data.train) train_file(f);
  out << YAML::EndSeq;
}

// lora.targets: a module name or all-linear, or a list of them.
void read_lora_targets(RecipeReader& in, Recipe& r) {
  const std::string key = "lora.targets";
  const Entry* e = in.find(key);
  if (!e) return;
  std::vector<std::string> names;
  if (e->node.IsSequence()) {
    if (e->node.size() == 0) {
      RecipeReader::bad(
          *e, key,
          fmt::format("expected {} or a list of module names, got an empty list", kAllLinear));
    }
    for (size_t i = 0; i < e->node.size(); ++i) {
      names.push_back(
          RecipeReader::text(Entry{e->node[i], e->where}, fmt::format("{}[{}]", key, i)));
    }
  } else {
    names.push_back(RecipeReader::text(*e, key));
  }
  r.lora->targets = resolve_lora_targets(names, e->where + ": " + key);
}

// train.resume: none | auto, else a checkpoint directory, resolved like every path.
void read_resume(RecipeReader& in, Recipe& r) {
  const std::string key = "train.resume";
  const Entry* e = in.find(key);
  if (!e) return;
  const std::string s = RecipeReader::text(*e, key);
  if (is_named(kResumeKeywords, s)) {
    r.train.resume = {parse_named(kResumeKeywords, s, key), ""};
  } else {
    r.train.resume = {ResumeMode::kCheckpoint, in.path(*e, key)};
  }
}

// model.path: a local path here; a hub id is found once the recipe has passed every check
// (locate_models, recipe.cc), and written back as the id.
void read_model_path(RecipeReader& in, Recipe& r) {
  r.model.path = in.path(in.require("model.path"), "model.path");
}

// model.revision: no value (or "") keeps the default, main.
void read_revision(RecipeReader& in, Recipe& r) {
  if (const Entry* e = in.find("model.revision"); e && !e->empty()) {
    r.model.revision = RecipeReader::text(*e, "model.revision");
  }
}

std::vector<RecipeKey> model_keys() {
  return {
      {"model.path", kRun, read_model_path,
       [](Emitter& out, const Recipe& r) { out << YAML::DoubleQuoted << r.model.base_name(); }},
      optional_path("model.adapter", kRun, at(&Recipe::model, &Model::adapter)),
      {"model.revision", kRun, read_revision,
       [](Emitter& out, const Recipe& r) { out << YAML::DoubleQuoted << r.model.revision; }},
      flag("model.download", kNotRun, at(&Recipe::model, &Model::download)),
  };
}

// Read into the recipe's LoraConfig, dropped when the recipe has no lora section (read_recipe,
// recipe.cc); written only when there is one.
std::vector<RecipeKey> lora_keys() {
  return {
      integer("lora.rank", kRun, kPositive, lora_at(&LoraConfig::rank)),
      real("lora.alpha", kRun, kPositiveF32, lora_at(&LoraConfig::alpha)),
      real("lora.dropout", kRun, kFraction, lora_at(&LoraConfig::dropout)),
      {"lora.targets", kRun, read_lora_targets,
       [](Emitter& out, const Recipe& r) {
         out << YAML::Flow << lora_target_names(r.lora->targets);
       }},
      flag("lora.rslora", kRun, lora_at(&LoraConfig::rslora)),
  };
}

// dpo.reference: base, or a model directory.
void read_dpo_reference(RecipeReader& in, Recipe& r) {
  const std::string key = "dpo.reference";
  const Entry* e = in.find(key);
  if (e == nullptr) return;
  const std::string s = RecipeReader::text(*e, key);
  r.dpo->reference = s == kReferenceBase ? s : in.path(*e, key);
}

// Read into the recipe's DpoConfig, dropped when the recipe has no dpo section; written only
// when there is one.
std::vector<RecipeKey> dpo_keys() {
  return {
      named("dpo.loss_type", kRun, kPreferenceLossNames, dpo_at(&DpoConfig::loss_type)),
      real("dpo.beta", kRun, {"> 0", [](double v) { return v > 0; }}, dpo_at(&DpoConfig::beta)),
      real("dpo.label_smoothing", kRun, {"in [0, 0.5)", [](double v) { return v >= 0 && v < 0.5; }},
           dpo_at(&DpoConfig::label_smoothing)),
      real("dpo.simpo_gamma", kRun, {">= 0", [](double v) { return v >= 0; }},
           dpo_at(&DpoConfig::simpo_gamma)),
      {"dpo.reference", kRun, read_dpo_reference,
       [](Emitter& out, const Recipe& r) { out << YAML::DoubleQuoted << r.dpo->reference; }},
      flag("dpo.precompute_reference", kRun, dpo_at(&DpoConfig::precompute_reference)),
  };
}

void read_format(RecipeReader& in, Recipe& r) {
  if (const Entry* e = in.find("data.format")) r.data.format = format_of(*e, "data.format");
}

// data.template and data.enable_thinking: no value (or "") keeps the default.
void read_template(RecipeReader& in, Recipe& r) {
  if (const Entry* e = in.find("data.template"); e && !e->empty()) {
    in.choice("data.template", r.data.chat_template, chat_template_names());
  }
}

void read_thinking(RecipeReader& in, Recipe& r) {
  if (const Entry* e = in.find("data.enable_thinking"); e && !e->node.IsNull()) {
    bool on = true;
    in.boolean("data.enable_thinking", on);
    r.data.enable_thinking = on;
  }
}

void write_thinking(Emitter& out, const Recipe& r) {
  if (r.data.enable_thinking) {
    out << *r.data.enable_thinking;
  } else {
    out << YAML::Null;
  }
}

std::vector<RecipeKey> data_keys() {
  const auto data = [](auto member) { return at(&Recipe::data, member); };
  return {
      {"data.train", kRun, read_train_files, write_train_files},
      {"data.format", kRun, read_format,
       [](Emitter& out, const Recipe& r) { out << std::string(data_format_name(r.data.format)); }},
      optional_path("data.tokenizer", kRun, data(&Data::tokenizer)),
      {"data.template", kRun, read_template,
       [](Emitter& out, const Recipe& r) { out << YAML::DoubleQuoted << r.data.chat_template; }},
      {"data.enable_thinking", kRun, read_thinking, write_thinking},
      integer("data.seq_len", kRun, {"> 1", [](int64_t v) { return v > 1; }}, data(&Data::seq_len)),
      flag("data.allow_long_context", kNotRun, data(&Data::allow_long_context)),
      named("data.overlong", kRun, kOverlongNames, data(&Data::overlong)),
      flag("data.pack", kRun, data(&Data::pack)),
      flag("data.shuffle", kRun, data(&Data::shuffle)),
      flag("data.train_on_prompt", kRun, data(&Data::train_on_prompt)),
      flag("data.skip_bad_lines", kRun, data(&Data::skip_bad_lines)),
      optional_path("data.cache_dir", kNotRun, data(&Data::cache_dir)),
      optional_path("data.eval", kNotRun, data(&Data::eval)),
      real("data.eval_split", kRun, kFraction, data(&Data::eval_split)),
      flag("data.allow_changed", kNotRun, data(&Data::allow_changed)),
  };
}

std::vector<RecipeKey> optimizer_keys() {
  const auto opt = [](auto member) { return at(&Recipe::optimizer, member); };
  const auto schedule = [](auto member) { return at(&Recipe::schedule, member); };
  return {
      named("optimizer.name", kRun, kOptimizerNames, opt(&Recipe::Optimizer::name)),
      real("optimizer.lr", kRun, kPositiveF32, opt(&Recipe::Optimizer::lr)),
      real("optimizer.weight_decay", kRun,
           {"in [0, 3.4028235e+38] (a float32)", [](double v) { return v >= 0 && v <= kF32Max; }},
           opt(&Recipe::Optimizer::weight_decay)),
      {"optimizer.betas", kRun,
       [](RecipeReader& in, Recipe& r) { in.pair("optimizer.betas", r.optimizer.betas); },
       [](Emitter& out, const Recipe& r) {
         out << YAML::Flow << YAML::BeginSeq << number(r.optimizer.betas[0])
             << number(r.optimizer.betas[1]) << YAML::EndSeq;
       }},
      real("optimizer.eps", kRun,
           {"in [1.17549435e-38, 3.4028235e+38] (a normal float32; a smaller one is 0 in fp32)",
            [](double v) { return v >= kF32MinNormal && v <= kF32Max; }},
           opt(&Recipe::Optimizer::eps)),
      real("optimizer.momentum", kRun, kFraction, opt(&Recipe::Optimizer::momentum)),
      named("schedule.name", kRun, kScheduleNames, schedule(&Recipe::Schedule::name)),
      integer("schedule.warmup_steps", kRun, kNonNegative,
              schedule(&Recipe::Schedule::warmup_steps)),
      real("schedule.min_lr_ratio", kRun, {"in [0, 1]", [](double v) { return v >= 0 && v <= 1; }},
           schedule(&Recipe::Schedule::min_lr_ratio)),
  };
}

std::vector<RecipeKey> train_keys() {
  const auto train = [](auto member) { return at(&Recipe::train, member); };
  const auto output = [](auto member) { return at(&Recipe::output, member); };
  return {
      integer("train.max_steps", kNotRun, kPositive, train(&Train::max_steps)),
      integer("train.epochs", kNotRun, kNonNegative, train(&Train::epochs)),
      integer("train.micro_batch_size", kRun, kPositive, train(&Train::micro_batch_size)),
      integer("train.grad_accum_steps", kRun, kPositive, train(&Train::grad_accum_steps)),
      real("train.grad_clip", kRun, {">= 0", [](double v) { return v >= 0; }},
           train(&Train::grad_clip)),
      {"train.seed", kRun,
       [](RecipeReader& in, Recipe& r) { in.unsigned_integer("train.seed", r.train.seed); },
       [](Emitter& out, const Recipe& r) { out << r.train.seed; }},
      flag("train.activation_checkpointing", kNotRun, train(&Train::activation_checkpointing)),
      integer("train.log_every", kNotRun, kPositive, train(&Train::log_every)),
      {"train.resume", kNotRun, read_resume,
       [](Emitter& out, const Recipe& r) { out << YAML::DoubleQuoted << r.train.resume.text(); }},
      named("train.dtype", kRun, kComputeDTypeNames, train(&Train::dtype)),
      named("train.device", kNotRun, kDeviceRequestNames, train(&Train::device)),
      required_path("output.dir", kNotRun, output(&Recipe::Output::dir)),
      named("output.dtype", kNotRun, kOutputDTypeNames, output(&Recipe::Output::dtype)),
      flag("output.tensorboard", kNotRun, output(&Recipe::Output::tensorboard)),
      flag("output.overwrite", kNotRun, output(&Recipe::Output::overwrite)),
  };
}

// dist.require_transport: an empty value keeps the default, no requirement.
void read_require_transport(RecipeReader& in, Recipe& r) {
  if (const Entry* e = in.find("dist.require_transport"); e && !e->empty()) {
    TransportKind kind{};
    in.named("dist.require_transport", kind, kTransportKindNames);
    r.dist.require_transport = kind;
  }
}

std::vector<RecipeKey> dist_keys() {
  const auto dist = [](auto member) { return at(&Recipe::dist, member); };
  return {
      named("dist.strategy", kNotRun, kShardStrategyNames, dist(&Dist::strategy)),
      // Bounded above: a worker per process slot is the most any node has, and a timeout becomes
      // int64 milliseconds (1e300 once overflowed into a negative timeout).
      integer("dist.nproc_per_node", kNotRun,
              {"in [1, 1024]", [](int64_t v) { return v >= 1 && v <= 1024; }},
              dist(&Dist::nproc_per_node)),
      real("dist.timeout_s", kNotRun,
           {"in (0, 604800] (a week)", [](double v) { return v > 0 && v <= 604800; }},
           dist(&Dist::timeout_s)),
      flag("dist.prefetch", kNotRun, dist(&Dist::prefetch)),
      integer("dist.threads_per_worker", kNotRun, kNonNegative, dist(&Dist::threads_per_worker)),
      {"dist.require_transport", kNotRun, read_require_transport,
       [](Emitter& out, const Recipe& r) {
         const auto& t = r.dist.require_transport;
         out << YAML::DoubleQuoted << (t ? name_of(kTransportKindNames, *t) : "");
       }},
      named("dist.communicator", kNotRun, kCommRequestNames, dist(&Dist::communicator)),
      named("dist.reduce_dtype", kNotRun, kReduceDTypeNames, dist(&Dist::reduce_dtype)),
      named("dist.private_network", kNotRun, kPrivateNetworkNames, dist(&Dist::private_network)),
      named("dist.authenticate_pairs", kNotRun, kPairAuthNames, dist(&Dist::authenticate_pairs)),
  };
}

// eval, checkpoint and failure: what the run does on the way, none of it defining the run.
std::vector<RecipeKey> progress_keys() {
  const auto eval = [](auto member) { return at(&Recipe::eval, member); };
  const auto ckpt = [](auto member) { return at(&Recipe::checkpoint, member); };
  const auto failure = [](auto member) { return at(&Recipe::failure, member); };
  using Checkpoint = Recipe::Checkpoint;
  return {
      integer("eval.every_steps", kNotRun, kNonNegative, eval(&Recipe::Eval::every_steps)),
      integer("eval.max_batches", kNotRun, kNonNegative, eval(&Recipe::Eval::max_batches)),
      integer("checkpoint.every_steps", kNotRun, kNonNegative, ckpt(&Checkpoint::every_steps)),
      integer("checkpoint.keep_last", kNotRun, kNonNegative, ckpt(&Checkpoint::keep_last)),
      integer("checkpoint.keep_best", kNotRun, kNonNegative, ckpt(&Checkpoint::keep_best)),
      named("checkpoint.best_metric", kNotRun, kBestMetricNames, ckpt(&Checkpoint::best_metric)),
      named("checkpoint.best_mode", kNotRun, kBestModeNames, ckpt(&Checkpoint::best_mode)),
      flag("checkpoint.background", kNotRun, ckpt(&Checkpoint::background)),
      integer("failure.max_restarts", kNotRun, kNonNegative,
              failure(&Recipe::Failure::max_restarts)),
      real("failure.sigterm_grace_s", kNotRun,
           {"in (0, 3600]", [](double v) { return v > 0 && v <= 3600; }},
           failure(&Recipe::Failure::sigterm_grace_s)),
  };
}

// Every row, in documentation order.
std::vector<RecipeKey> all_keys() {
  std::vector<RecipeKey> out;
  for (const auto& section : {model_keys, lora_keys, dpo_keys, data_keys, optimizer_keys,
                              train_keys, dist_keys, progress_keys}) {
    std::vector<RecipeKey> rows = section();
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return out;
}

}  // namespace

const std::vector<RecipeKey>& recipe_schema() {
  static const std::vector<RecipeKey> schema = all_keys();
  return schema;
}

}  // namespace kiln
