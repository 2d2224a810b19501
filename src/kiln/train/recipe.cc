#include "kiln/train/recipe.h"

#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/named_values.h"
#include "kiln/data/formats.h"
#include "kiln/hub/model_location.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/utf8.h"

namespace kiln {

namespace {

// Every key, in documentation order (recipe_to_yaml writes the same order); `defines_run`: the
// key is part of the run's identity (run_identity.h), so a checkpoint written under another
// value is another run's.
struct KeySpec {
  const char* name;
  bool defines_run;
};
const KeySpec kKeySpecs[] = {
    {"model.path", true},
    {"model.adapter", true},
    {"model.revision", true},
    {"model.download", false},
    {"lora.rank", true},
    {"lora.alpha", true},
    {"lora.dropout", true},
    {"lora.targets", true},
    {"lora.rslora", true},
    {"data.train", true},
    {"data.format", true},
    {"data.tokenizer", true},
    {"data.template", true},
    {"data.enable_thinking", true},
    {"data.seq_len", true},
    {"data.allow_long_context", false},
    {"data.overlong", true},
    {"data.pack", true},
    {"data.shuffle", true},
    {"data.train_on_prompt", true},
    {"data.skip_bad_lines", true},
    {"data.cache_dir", false},
    {"data.eval", false},
    {"data.eval_split", true},
    {"data.allow_changed", false},
    {"optimizer.name", true},
    {"optimizer.lr", true},
    {"optimizer.weight_decay", true},
    {"optimizer.betas", true},
    {"optimizer.eps", true},
    {"optimizer.momentum", true},
    {"schedule.name", true},
    {"schedule.warmup_steps", true},
    {"schedule.min_lr_ratio", true},
    {"train.max_steps", false},
    {"train.epochs", false},
    {"train.micro_batch_size", true},
    {"train.grad_accum_steps", true},
    {"train.grad_clip", true},
    {"train.seed", true},
    {"train.activation_checkpointing", false},
    {"train.log_every", false},
    {"train.resume", false},
    {"train.dtype", true},
    {"train.device", false},
    {"output.dir", false},
    {"output.dtype", false},
    {"output.tensorboard", false},
    {"output.overwrite", false},
    {"dist.strategy", false},
    {"dist.nproc_per_node", false},
    {"dist.timeout_s", false},
    {"dist.prefetch", false},
    {"dist.threads_per_worker", false},
    {"dist.require_transport", false},
    {"dist.communicator", false},
    {"dist.reduce_dtype", false},
    {"dist.private_network", false},
    {"dist.authenticate_pairs", false},
    {"eval.every_steps", false},
    {"eval.max_batches", false},
    {"checkpoint.every_steps", false},
    {"checkpoint.keep_last", false},
    {"checkpoint.keep_best", false},
    {"checkpoint.best_metric", false},
    {"checkpoint.best_mode", false},
    {"checkpoint.background", false},
    {"failure.max_restarts", false},
    {"failure.sigterm_grace_s", false},
};

// Other tools' names for kiln's keys (recipe.h, ForeignKey); docs/recipe.md lists them.
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

std::vector<std::string> key_names(bool identity_only) {
  std::vector<std::string> out;
  for (const KeySpec& k : kKeySpecs) {
    if (!identity_only || k.defines_run) out.emplace_back(k.name);
  }
  return out;
}
const std::vector<std::string> kKeys = key_names(false);
const std::vector<std::string> kSections = {"model",    "lora",       "data",   "optimizer",
                                            "schedule", "train",      "output", "dist",
                                            "eval",     "checkpoint", "failure"};

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

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

// What an unknown key may have meant: another tool's name for a kiln key ("lora.r": " (PEFT's
// name; kiln's is 'lora.rank')"), else a near miss among `candidates` (" (did you mean 'x'?)"),
// else a key elsewhere with the same last component ("train.lr" -> "optimizer.lr"), else one
// whose last component is a near miss ("train.warmup_step" -> "schedule.warmup_steps"), else "".
std::string suggest(const std::string& key, const std::vector<std::string>& candidates) {
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
  for (const std::string& k : kKeys) {
    if (leaf_of(k) == leaf) return did_you_mean(k);
  }
  if (const std::string* k = nearest(leaf, kKeys, leaf_of, std::max<size_t>(1, leaf.size() / 4))) {
    return did_you_mean(*k);
  }
  return "";
}

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "an empty value";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a map";
  return fmt::format("'{}'", n.Scalar());
}

// One key's value and where it came from ("recipe.yaml:7" or "override 'train.seed=3'").
struct Entry {
  YAML::Node node;
  std::string where;
  bool from_override = false;
};

// Collects the recipe's entries by dotted key, then reads them into typed fields; every error
// names the entry's origin and key.
class Reader {
 public:
  explicit Reader(std::string what) : what_(std::move(what)) {}

  std::string at(const YAML::Node& n) const {
    YAML::Mark m = n.Mark();
    return m.is_null() ? what_ : fmt::format("{}:{}", what_, m.line + 1);
  }

  void add_document(const YAML::Node& root) {
    if (!root.IsDefined() || root.IsNull()) return;  // an empty file: defaults only
    if (!root.IsMap()) {
      fail("{}: expected a map of sections (model, data, ...), got {}", at(root), describe(root));
    }
    std::map<std::string, std::string> sections_seen;
    for (const auto& it : root) {
      const YAML::Node& k = it.first;
      if (!k.IsScalar()) fail("{}: expected a section name, got {}", at(k), describe(k));
      const std::string section = k.Scalar();
      if (!contains(kSections, section)) {
        if (contains(kKeys, section)) {
          fail("{}: unknown key '{}' (nest it: '{}:' then '{}:')", at(k), section,
               section.substr(0, section.find('.')), section.substr(section.find('.') + 1));
        }
        fail("{}: unknown key '{}'{}", at(k), section, suggest(section, kSections));
      }
      auto [prev, fresh] = sections_seen.emplace(section, at(k));
      if (!fresh) fail("{}: duplicate key '{}' (also at {})", at(k), section, prev->second);
      sections_.insert(section);
      const YAML::Node& v = it.second;
      if (v.IsNull()) continue;  // an empty section keeps every default
      if (!v.IsMap()) fail("{}: {}: expected a map of keys, got {}", at(k), section, describe(v));
      for (const auto& jt : v) {
        if (!jt.first.IsScalar()) {
          fail("{}: {}: expected a key name, got {}", at(jt.first), section, describe(jt.first));
        }
        const std::string key = section + "." + jt.first.Scalar();
        if (!contains(kKeys, key)) {
          fail("{}: unknown key '{}'{}", at(jt.first), key, suggest(key, kKeys));
        }
        auto [old, added] = entries_.emplace(key, Entry{jt.second, at(jt.first)});
        if (!added)
          fail("{}: duplicate key '{}' (also at {})", at(jt.first), key, old->second.where);
      }
    }
  }

  void add_override(const std::string& text) {
    const std::string where = fmt::format("override '{}'", text);
    size_t eq = text.find('=');
    if (eq == std::string::npos) fail("{}: expected dotted.key=value", where);
    const std::string key = text.substr(0, eq);
    if (!contains(kKeys, key)) fail("{}: unknown key '{}'{}", where, key, suggest(key, kKeys));
    YAML::Node node;
    try {
      node = YAML::Load(text.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      fail("{}: {}: malformed YAML value: {}", where, key, e.msg);
    }
    entries_[key] = Entry{node, where, true};  // later overrides win
    sections_.insert(key.substr(0, key.find('.')));
  }

  // Whether the recipe has the section: in the file (even empty) or by an override of its keys.
  bool has_section(const std::string& section) const { return sections_.count(section) > 0; }

  // The entry for `key`, or nullptr when the recipe leaves it at its default.
  const Entry* find(const std::string& key) {
    KILN_CHECK(contains(kKeys, key), "recipe key '{}' is not in kKeys", key);
    read_.insert(key);
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }

  const Entry& require(const std::string& key) {
    const Entry* e = find(key);
    if (!e) fail("{}: missing required key '{}'", what_, key);
    return *e;
  }

  // Every key in kKeys must be read by parse_recipe, so the table and the struct cannot drift.
  void check_all_read() const {
    for (const std::string& k : kKeys) KILN_CHECK(read_.count(k), "recipe key '{}' never read", k);
  }

  [[noreturn]] static void bad(const Entry& e, const std::string& key, const std::string& msg) {
    fail("{}: {}: {}", e.where, key, msg);
  }

  static std::string scalar(const Entry& e, const std::string& key, const char* expected) {
    if (!e.node.IsScalar()) {
      bad(e, key, fmt::format("expected {}, got {}", expected, describe(e.node)));
    }
    // YAML text is UTF-8; an ill-formed byte would not survive recipe_to_yaml's round trip.
    if (const size_t at = text::find_invalid_utf8(e.node.Scalar()); at != std::string::npos) {
      bad(e, key, fmt::format("not valid UTF-8 (byte {} of the value)", at));
    }
    return e.node.Scalar();
  }

  static double to_double(const Entry& e, const std::string& key) {
    std::string s = scalar(e, key, "a number");
    const char* first = s.data() + (!s.empty() && s[0] == '+');
    double v = 0;
    auto [ptr, ec] = std::from_chars(first, s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size() || first == ptr || !std::isfinite(v)) {
      bad(e, key, fmt::format("expected a number, got '{}'", s));
    }
    return v;
  }

  template <typename T>
  static T to_integer(const Entry& e, const std::string& key) {
    const char* expected = std::is_signed_v<T> ? "an integer" : "a non-negative integer";
    std::string s = scalar(e, key, expected);
    const char* first = s.data() + (!s.empty() && s[0] == '+');
    T v = 0;
    auto [ptr, ec] = std::from_chars(first, s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) {
      bad(e, key,
          fmt::format("'{}' is out of range (at most {})", s, std::numeric_limits<T>::max()));
    }
    if (ec != std::errc() || ptr != s.data() + s.size() || first == ptr) {
      bad(e, key, fmt::format("expected {}, got '{}'", expected, s));
    }
    return v;
  }

  // A number; `ok` says whether it is in range and `rule` says what the range is ("> 0").
  template <typename Ok>
  void real(const std::string& key, double& out, const char* rule, Ok ok) {
    const Entry* e = find(key);
    if (!e) return;
    double v = to_double(*e, key);
    if (!ok(v)) bad(*e, key, fmt::format("must be {}, got {}", rule, e->node.Scalar()));
    out = v;
  }

  template <typename T, typename Ok>
  void integer(const std::string& key, T& out, const char* rule, Ok ok) {
    const Entry* e = find(key);
    if (!e) return;
    int64_t v = to_integer<int64_t>(*e, key);
    if (!ok(v)) bad(*e, key, fmt::format("must be {}, got {}", rule, v));
    if constexpr (sizeof(T) < sizeof(int64_t)) {
      if (v > std::numeric_limits<T>::max()) {
        bad(*e, key,
            fmt::format("{} is out of range (at most {})", v, std::numeric_limits<T>::max()));
      }
    }
    out = static_cast<T>(v);
  }

  void unsigned_integer(const std::string& key, uint64_t& out) {
    if (const Entry* e = find(key)) out = to_integer<uint64_t>(*e, key);
  }

  void boolean(const std::string& key, bool& out) {
    const Entry* e = find(key);
    if (!e) return;
    std::string s = scalar(*e, key, "true or false");
    if (!YAML::convert<bool>::decode(e->node, out)) {
      bad(*e, key, fmt::format("expected true or false, got '{}'", s));
    }
  }

  static std::string text(const Entry& e, const std::string& key) {
    std::string s = scalar(e, key, "a string");
    if (s.empty()) bad(e, key, "expected a non-empty string");
    return s;
  }

  void choice(const std::string& key, std::string& out, const std::vector<std::string>& valid) {
    const Entry* e = find(key);
    if (!e) return;
    std::string s = text(*e, key);
    if (!contains(valid, s)) {
      bad(*e, key, fmt::format("invalid value '{}' (valid: {})", s, fmt::join(valid, ", ")));
    }
    out = s;
  }

  // One of `table`'s names (base/named_values.h); the error lists them in the table's order.
  template <typename E, size_t N>
  void named(const std::string& key, E& out, const std::array<Named<E>, N>& table) {
    const Entry* e = find(key);
    if (!e) return;
    const std::string s = text(*e, key);
    if (!is_named(table, s)) {
      bad(*e, key, fmt::format("invalid value '{}' (valid: {})", s, allowed_names(table)));
    }
    out = parse_named(table, s, key);
  }

  void pair(const std::string& key, std::array<double, 2>& out) {
    const Entry* e = find(key);
    if (!e) return;
    if (!e->node.IsSequence() || e->node.size() != 2) {
      bad(*e, key, fmt::format("expected a list of two numbers, got {}", describe(e->node)));
    }
    for (size_t i = 0; i < 2; ++i) {
      Entry item{e->node[i], e->where};
      std::string item_key = fmt::format("{}[{}]", key, i);
      double v = to_double(item, item_key);
      if (!(v >= 0 && v < 1)) bad(item, item_key, fmt::format("must be in [0, 1), got {}", v));
      out[i] = v;
    }
  }

 private:
  std::string what_;
  std::map<std::string, Entry> entries_;
  std::set<std::string> read_;
  std::set<std::string> sections_;
};

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

// A data format's name, from its name or an alias (data/formats.h holds the one list).
std::string format_of(const Entry& e, const std::string& key) {
  const std::string s = Reader::text(e, key);
  const auto format = parse_data_format(s);
  if (!format) {
    Reader::bad(e, key, fmt::format("invalid value '{}' (valid: {})", s, data_format_choices()));
  }
  return std::string(data_format_name(*format));
}

// One data.train entry: a path, or a map {path, format, weight}.
template <typename PathOf>
Recipe::TrainFile train_file(const Entry& e, const std::string& key, const PathOf& path_of) {
  Recipe::TrainFile f;
  if (!e.node.IsMap()) {
    f.path = path_of(e, key);
    return f;
  }
  for (const auto& kv : e.node) {
    const std::string field = kv.first.IsScalar() ? kv.first.Scalar() : describe(kv.first);
    if (field != "path" && field != "format" && field != "weight") {
      Reader::bad(e, key,
                  fmt::format("unknown field '{}' (an entry is a path or a map of path, format "
                              "and weight)",
                              field));
    }
  }
  const YAML::Node path = e.node["path"];
  if (!path) Reader::bad(e, key, "missing 'path' (an entry is a path or {path, format, weight})");
  f.path = path_of(Entry{path, e.where, e.from_override}, key + ".path");
  if (const YAML::Node n = e.node["format"])
    f.format = format_of(Entry{n, e.where}, key + ".format");
  if (const YAML::Node n = e.node["weight"]) {
    const Entry w{n, e.where};
    f.weight = Reader::to_double(w, key + ".weight");
    if (!(f.weight > 0 && f.weight <= 1000)) {
      Reader::bad(w, key + ".weight", fmt::format("must be in (0, 1000], got {}", n.Scalar()));
    }
  }
  return f;
}

// lora.targets: a module name or all-linear, or a list of them.
std::vector<LoraTarget> lora_targets(const Entry& e) {
  const std::string key = "lora.targets";
  std::vector<std::string> names;
  if (e.node.IsSequence()) {
    if (e.node.size() == 0) {
      Reader::bad(
          e, key,
          fmt::format("expected {} or a list of module names, got an empty list", kAllLinear));
    }
    for (size_t i = 0; i < e.node.size(); ++i) {
      names.push_back(Reader::text(Entry{e.node[i], e.where}, fmt::format("{}[{}]", key, i)));
    }
  } else {
    names.push_back(Reader::text(e, key));
  }
  return resolve_lora_targets(names, e.where + ": " + key);
}

// The lora section, nullopt without one (full fine-tuning). Its defaults are decided here:
// rank 8, alpha 16, dropout 0, every projection (PEFT's own default is q_proj and v_proj; kiln
// adapts all seven, as the example does), no rslora.
std::optional<LoraConfig> read_lora(Reader& in) {
  LoraConfig l;
  l.targets = resolve_lora_targets({kAllLinear}, "lora.targets");
  constexpr double kF32Max = std::numeric_limits<float>::max();
  in.integer("lora.rank", l.rank, "> 0", [](int64_t v) { return v > 0; });
  in.real("lora.alpha", l.alpha, "in (0, 3.4028235e+38] (a float32)",
          [](double v) { return v > 0 && v <= kF32Max; });
  in.real("lora.dropout", l.dropout, "in [0, 1)", [](double v) { return v >= 0 && v < 1; });
  if (const Entry* e = in.find("lora.targets")) l.targets = lora_targets(*e);
  in.boolean("lora.rslora", l.rslora);
  if (!in.has_section("lora")) return std::nullopt;
  return l;
}

}  // namespace

const std::vector<std::string>& recipe_keys() { return kKeys; }

std::span<const ForeignKey> foreign_recipe_keys() { return kForeignKeys; }

const std::vector<std::string>& run_identity_keys() {
  static const std::vector<std::string> keys = key_names(true);
  return keys;
}

const char* recipe_path_rule() {
  return "a relative path in a recipe file is relative to the file's folder, one on the command "
         "line to the working directory";
}

const std::string& train_file_format(const Recipe& r, const Recipe::TrainFile& f) {
  return f.format.empty() ? r.data.format : f.format;
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
  Reader in(what);
  in.add_document(root);
  for (const std::string& o : overrides) in.add_override(o);

  Recipe r;
  // Every path resolves one way (recipe.h): an override is typed relative to the shell's
  // directory, a file entry to the file's.
  const auto path_of = [&](const Entry& e, const std::string& key) {
    fs::path p(Reader::text(e, key));
    if (p.is_relative()) {
      p = (e.from_override || base_dir.empty() ? fs::current_path() : base_dir) / p;
    }
    return fs::absolute(p).lexically_normal().string();
  };
  // An optional path: empty (or no value) keeps the default.
  const auto optional_path = [&](const std::string& key, std::string& out) {
    const Entry* e = in.find(key);
    if (!e || e->node.IsNull() || (e->node.IsScalar() && e->node.Scalar().empty())) return;
    out = path_of(*e, key);
  };
  // A local path wins; else a hub id from the Hugging Face cache (hub/model_location.h). Found
  // nowhere (and not downloaded): the local path, and the rule kept for the preflight's error (a
  // recipe is also read where its model need not exist: prepare-data, tests).
  const auto model_dir = [&](const Entry& e, const std::string& key, const std::string& rev) {
    ModelLocation at{path_of(e, key), "", ""};
    std::error_code ec;  // a path the filesystem refuses (too long, say) is simply not there
    if (!fs::exists(at.dir, ec)) {
      try {
        ModelLocation hub = locate_model(Reader::text(e, key), {key, rev, r.model.download});
        if (hub.from_hub()) at = std::move(hub);
      } catch (const Error& err) {
        if (r.model.download) throw;
        r.model.hub_note = err.what();
      }
    }
    return at;
  };
  if (const Entry* e = in.find("model.revision");
      e && !e->node.IsNull() && !(e->node.IsScalar() && e->node.Scalar().empty())) {
    r.model.revision = Reader::text(*e, "model.revision");
  }
  in.boolean("model.download", r.model.download);
  const ModelLocation base = model_dir(in.require("model.path"), "model.path", r.model.revision);
  r.model.path = base.dir.string();
  r.model.hub_id = base.repo_id;
  if (base.from_hub()) r.model.revision = base.dir.filename().string();  // the commit read
  if (const Entry* e = in.find("model.adapter");
      e && !e->node.IsNull() && !(e->node.IsScalar() && e->node.Scalar().empty())) {
    r.model.adapter = model_dir(*e, "model.adapter", "").dir.string();
  }
  r.lora = read_lora(in);
  if (!r.model.adapter.empty() && !r.lora) {
    Reader::bad(*in.find("model.adapter"), "model.adapter",
                "continues training a PEFT adapter, but the recipe has no lora section (add one "
                "whose rank, alpha, targets and rslora match the adapter's adapter_config.json)");
  }
  if (const Entry* found =
          use == RecipeUse::kTrain ? &in.require("data.train") : in.find("data.train")) {
    const Entry& e = *found;
    if (!e.node.IsSequence()) {
      r.data.train = {train_file(e, "data.train", path_of)};
    } else {
      if (e.node.size() == 0) {
        Reader::bad(e, "data.train", "expected a file or a list of files, got an empty list");
      }
      for (size_t i = 0; i < e.node.size(); ++i) {
        Entry item{e.node[i], e.where, e.from_override};
        r.data.train.push_back(train_file(item, fmt::format("data.train[{}]", i), path_of));
      }
    }
  }
  if (const Entry* e = in.find("data.format")) r.data.format = format_of(*e, "data.format");
  optional_path("data.tokenizer", r.data.tokenizer);
  // data.template and data.enable_thinking: no value (or "") keeps the default.
  if (const Entry* e = in.find("data.template");
      e && !e->node.IsNull() && !(e->node.IsScalar() && e->node.Scalar().empty())) {
    in.choice("data.template", r.data.chat_template, chat_template_names());
  }
  if (const Entry* e = in.find("data.enable_thinking"); e && !e->node.IsNull()) {
    bool on = true;
    in.boolean("data.enable_thinking", on);
    r.data.enable_thinking = on;
  }
  in.integer("data.seq_len", r.data.seq_len, "> 1", [](int64_t v) { return v > 1; });
  in.boolean("data.allow_long_context", r.data.allow_long_context);
  in.named("data.overlong", r.data.overlong, kOverlongNames);
  in.boolean("data.pack", r.data.pack);
  in.boolean("data.shuffle", r.data.shuffle);
  in.boolean("data.train_on_prompt", r.data.train_on_prompt);
  in.boolean("data.skip_bad_lines", r.data.skip_bad_lines);
  optional_path("data.cache_dir", r.data.cache_dir);
  optional_path("data.eval", r.data.eval);
  in.real("data.eval_split", r.data.eval_split, "in [0, 1)",
          [](double v) { return v >= 0 && v < 1; });
  if (r.data.eval_split > 0 && !r.data.eval.empty()) {
    Reader::bad(*in.find("data.eval_split"), "data.eval_split",
                fmt::format("holds out training data for evaluation, but data.eval ({}) is set "
                            "too: set one of them",
                            r.data.eval));
  }
  in.boolean("data.allow_changed", r.data.allow_changed);

  in.named("optimizer.name", r.optimizer.name, kOptimizerNames);
  // The optimizer's arithmetic is fp32, as the parameters are: a value fp32 cannot hold (lr 1e39
  // is finite as a double, infinite as a float) would make every weight non-finite.
  constexpr double kF32Max = std::numeric_limits<float>::max();
  constexpr double kF32MinNormal = std::numeric_limits<float>::min();
  in.real("optimizer.lr", r.optimizer.lr, "in (0, 3.4028235e+38] (a float32)",
          [](double v) { return v > 0 && v <= kF32Max; });
  in.real("optimizer.weight_decay", r.optimizer.weight_decay, "in [0, 3.4028235e+38] (a float32)",
          [](double v) { return v >= 0 && v <= kF32Max; });
  in.pair("optimizer.betas", r.optimizer.betas);
  in.real("optimizer.eps", r.optimizer.eps,
          "in [1.17549435e-38, 3.4028235e+38] (a normal float32; a smaller one is 0 in fp32)",
          [](double v) { return v >= kF32MinNormal && v <= kF32Max; });
  in.real("optimizer.momentum", r.optimizer.momentum, "in [0, 1)",
          [](double v) { return v >= 0 && v < 1; });

  in.named("schedule.name", r.schedule.name, kScheduleNames);
  in.integer("schedule.warmup_steps", r.schedule.warmup_steps, ">= 0",
             [](int64_t v) { return v >= 0; });
  in.real("schedule.min_lr_ratio", r.schedule.min_lr_ratio, "in [0, 1]",
          [](double v) { return v >= 0 && v <= 1; });

  auto positive = [](int64_t v) { return v > 0; };
  in.integer("train.max_steps", r.train.max_steps, "> 0", positive);
  in.integer("train.epochs", r.train.epochs, ">= 0", [](int64_t v) { return v >= 0; });
  in.integer("train.micro_batch_size", r.train.micro_batch_size, "> 0", positive);
  in.integer("train.grad_accum_steps", r.train.grad_accum_steps, "> 0", positive);
  in.real("train.grad_clip", r.train.grad_clip, ">= 0", [](double v) { return v >= 0; });
  {
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
          e != nullptr ? e->where : what, r.train.grad_accum_steps, r.train.micro_batch_size,
          r.data.seq_len, tokens, kMaxStepTokens,
          kMaxStepTokens / (int64_t{r.train.micro_batch_size} * r.data.seq_len));
    }
  }
  in.unsigned_integer("train.seed", r.train.seed);
  in.boolean("train.activation_checkpointing", r.train.activation_checkpointing);
  in.integer("train.log_every", r.train.log_every, "> 0", positive);
  if (const Entry* e = in.find("train.resume")) {
    r.train.resume = Reader::text(*e, "train.resume");
    if (r.train.resume != "none" && r.train.resume != "auto") {
      r.train.resume = path_of(*e, "train.resume");
    }
  }
  in.named("train.dtype", r.train.dtype, kComputeDTypeNames);
  in.named("train.device", r.train.device, kDeviceRequestNames);

  r.output.dir = path_of(in.require("output.dir"), "output.dir");
  in.named("output.dtype", r.output.dtype, kOutputDTypeNames);
  in.boolean("output.tensorboard", r.output.tensorboard);
  in.boolean("output.overwrite", r.output.overwrite);

  in.named("dist.strategy", r.dist.strategy, kShardStrategyNames);
  // Bounded above: a worker per process slot is the most any node has, and a timeout becomes
  // int64 milliseconds (1e300 once overflowed into a negative timeout).
  in.integer("dist.nproc_per_node", r.dist.nproc_per_node, "in [1, 1024]",
             [](int64_t v) { return v >= 1 && v <= 1024; });
  in.real("dist.timeout_s", r.dist.timeout_s, "in (0, 604800] (a week)",
          [](double v) { return v > 0 && v <= 604800; });
  in.boolean("dist.prefetch", r.dist.prefetch);
  in.integer("dist.threads_per_worker", r.dist.threads_per_worker, ">= 0",
             [](int64_t v) { return v >= 0; });
  // An empty value keeps the default: no requirement.
  if (const Entry* e = in.find("dist.require_transport");
      e != nullptr && !e->node.IsNull() && !(e->node.IsScalar() && e->node.Scalar().empty())) {
    TransportKind kind{};
    in.named("dist.require_transport", kind, kTransportKindNames);
    r.dist.require_transport = kind;
  }

  in.named("dist.communicator", r.dist.communicator, kCommRequestNames);
  in.named("dist.reduce_dtype", r.dist.reduce_dtype, kReduceDTypeNames);
  in.named("dist.private_network", r.dist.private_network, kPrivateNetworkNames);
  in.named("dist.authenticate_pairs", r.dist.authenticate_pairs, kPairAuthNames);

  auto non_negative = [](int64_t v) { return v >= 0; };
  in.integer("checkpoint.every_steps", r.checkpoint.every_steps, ">= 0", non_negative);
  in.integer("eval.every_steps", r.eval.every_steps, ">= 0", non_negative);
  in.integer("eval.max_batches", r.eval.max_batches, ">= 0", non_negative);
  in.integer("checkpoint.keep_last", r.checkpoint.keep_last, ">= 0", non_negative);
  in.integer("checkpoint.keep_best", r.checkpoint.keep_best, ">= 0", non_negative);
  in.named("checkpoint.best_metric", r.checkpoint.best_metric, kBestMetricNames);
  in.named("checkpoint.best_mode", r.checkpoint.best_mode, kBestModeNames);
  in.boolean("checkpoint.background", r.checkpoint.background);
  in.integer("failure.max_restarts", r.failure.max_restarts, ">= 0", non_negative);
  in.real("failure.sigterm_grace_s", r.failure.sigterm_grace_s, "in (0, 3600]",
          [](double v) { return v > 0 && v <= 3600; });

  in.check_all_read();
  return r;
}

Recipe load_recipe(const fs::path& yaml_path, const std::vector<std::string>& overrides,
                   RecipeUse use) {
  return parse_recipe(read_file(yaml_path), yaml_path.string(),
                      fs::absolute(yaml_path).parent_path(), overrides, use);
}

std::string recipe_to_yaml(const Recipe& r) {
  YAML::Emitter out;
  out << YAML::Comment("Effective kiln recipe: every key, defaults included (docs/recipe.md).");
  out << YAML::BeginMap;
  auto section = [&](const char* name) {
    out << YAML::Key << name << YAML::Value << YAML::BeginMap;
  };
  auto end = [&] { out << YAML::EndMap; };

  section("model");
  out << YAML::Key << "path" << YAML::Value << YAML::DoubleQuoted << r.model.base_name();
  out << YAML::Key << "adapter" << YAML::Value << YAML::DoubleQuoted << r.model.adapter;
  out << YAML::Key << "revision" << YAML::Value << YAML::DoubleQuoted << r.model.revision;
  out << YAML::Key << "download" << YAML::Value << r.model.download;
  end();
  if (r.lora) {  // no section: full fine-tuning
    section("lora");
    out << YAML::Key << "rank" << YAML::Value << r.lora->rank;
    out << YAML::Key << "alpha" << YAML::Value << number(r.lora->alpha);
    out << YAML::Key << "dropout" << YAML::Value << number(r.lora->dropout);
    out << YAML::Key << "targets" << YAML::Value << YAML::Flow
        << lora_target_names(r.lora->targets);
    out << YAML::Key << "rslora" << YAML::Value << r.lora->rslora;
    end();
  }
  section("data");
  out << YAML::Key << "train" << YAML::Value;
  // A plain path where the entry is one, else {path, format, weight}.
  const auto train_file = [&](const Recipe::TrainFile& f) {
    if (f.format.empty() && f.weight == 1.0) {
      out << YAML::DoubleQuoted << f.path;
      return;
    }
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "path" << YAML::Value << YAML::DoubleQuoted << f.path;
    if (!f.format.empty()) out << YAML::Key << "format" << YAML::Value << f.format;
    out << YAML::Key << "weight" << YAML::Value << number(f.weight);
    out << YAML::EndMap;
  };
  if (r.data.train.size() == 1) {
    train_file(r.data.train[0]);
  } else {
    out << YAML::BeginSeq;
    for (const Recipe::TrainFile& f : r.data.train) train_file(f);
    out << YAML::EndSeq;
  }
  out << YAML::Key << "format" << YAML::Value << r.data.format;
  out << YAML::Key << "tokenizer" << YAML::Value << YAML::DoubleQuoted << r.data.tokenizer;
  out << YAML::Key << "template" << YAML::Value << YAML::DoubleQuoted << r.data.chat_template;
  out << YAML::Key << "enable_thinking" << YAML::Value;
  if (r.data.enable_thinking) {
    out << *r.data.enable_thinking;
  } else {
    out << YAML::Null;
  }
  out << YAML::Key << "seq_len" << YAML::Value << r.data.seq_len;
  out << YAML::Key << "allow_long_context" << YAML::Value << r.data.allow_long_context;
  out << YAML::Key << "overlong" << YAML::Value << name_of(kOverlongNames, r.data.overlong);
  out << YAML::Key << "pack" << YAML::Value << r.data.pack;
  out << YAML::Key << "shuffle" << YAML::Value << r.data.shuffle;
  out << YAML::Key << "train_on_prompt" << YAML::Value << r.data.train_on_prompt;
  out << YAML::Key << "skip_bad_lines" << YAML::Value << r.data.skip_bad_lines;
  out << YAML::Key << "cache_dir" << YAML::Value << YAML::DoubleQuoted << r.data.cache_dir;
  out << YAML::Key << "eval" << YAML::Value << YAML::DoubleQuoted << r.data.eval;
  out << YAML::Key << "eval_split" << YAML::Value << number(r.data.eval_split);
  out << YAML::Key << "allow_changed" << YAML::Value << r.data.allow_changed;
  end();
  section("optimizer");
  out << YAML::Key << "name" << YAML::Value << name_of(kOptimizerNames, r.optimizer.name);
  out << YAML::Key << "lr" << YAML::Value << number(r.optimizer.lr);
  out << YAML::Key << "weight_decay" << YAML::Value << number(r.optimizer.weight_decay);
  out << YAML::Key << "betas" << YAML::Value << YAML::Flow << YAML::BeginSeq
      << number(r.optimizer.betas[0]) << number(r.optimizer.betas[1]) << YAML::EndSeq;
  out << YAML::Key << "eps" << YAML::Value << number(r.optimizer.eps);
  out << YAML::Key << "momentum" << YAML::Value << number(r.optimizer.momentum);
  end();
  section("schedule");
  out << YAML::Key << "name" << YAML::Value << name_of(kScheduleNames, r.schedule.name);
  out << YAML::Key << "warmup_steps" << YAML::Value << r.schedule.warmup_steps;
  out << YAML::Key << "min_lr_ratio" << YAML::Value << number(r.schedule.min_lr_ratio);
  end();
  section("train");
  out << YAML::Key << "max_steps" << YAML::Value << r.train.max_steps;
  out << YAML::Key << "epochs" << YAML::Value << r.train.epochs;
  out << YAML::Key << "micro_batch_size" << YAML::Value << r.train.micro_batch_size;
  out << YAML::Key << "grad_accum_steps" << YAML::Value << r.train.grad_accum_steps;
  out << YAML::Key << "grad_clip" << YAML::Value << number(r.train.grad_clip);
  out << YAML::Key << "seed" << YAML::Value << r.train.seed;
  out << YAML::Key << "activation_checkpointing" << YAML::Value << r.train.activation_checkpointing;
  out << YAML::Key << "log_every" << YAML::Value << r.train.log_every;
  out << YAML::Key << "resume" << YAML::Value << YAML::DoubleQuoted << r.train.resume;
  out << YAML::Key << "dtype" << YAML::Value << name_of(kComputeDTypeNames, r.train.dtype);
  out << YAML::Key << "device" << YAML::Value << name_of(kDeviceRequestNames, r.train.device);
  end();
  section("output");
  out << YAML::Key << "dir" << YAML::Value << YAML::DoubleQuoted << r.output.dir;
  out << YAML::Key << "dtype" << YAML::Value << name_of(kOutputDTypeNames, r.output.dtype);
  out << YAML::Key << "tensorboard" << YAML::Value << r.output.tensorboard;
  out << YAML::Key << "overwrite" << YAML::Value << r.output.overwrite;
  end();
  section("dist");
  out << YAML::Key << "strategy" << YAML::Value << name_of(kShardStrategyNames, r.dist.strategy);
  out << YAML::Key << "nproc_per_node" << YAML::Value << r.dist.nproc_per_node;
  out << YAML::Key << "timeout_s" << YAML::Value << number(r.dist.timeout_s);
  out << YAML::Key << "prefetch" << YAML::Value << r.dist.prefetch;
  out << YAML::Key << "threads_per_worker" << YAML::Value << r.dist.threads_per_worker;
  out << YAML::Key << "require_transport" << YAML::Value << YAML::DoubleQuoted
      << (r.dist.require_transport ? name_of(kTransportKindNames, *r.dist.require_transport) : "");
  out << YAML::Key << "communicator" << YAML::Value
      << name_of(kCommRequestNames, r.dist.communicator);
  out << YAML::Key << "reduce_dtype" << YAML::Value
      << name_of(kReduceDTypeNames, r.dist.reduce_dtype);
  out << YAML::Key << "private_network" << YAML::Value
      << name_of(kPrivateNetworkNames, r.dist.private_network);
  out << YAML::Key << "authenticate_pairs" << YAML::Value
      << name_of(kPairAuthNames, r.dist.authenticate_pairs);
  end();
  section("eval");
  out << YAML::Key << "every_steps" << YAML::Value << r.eval.every_steps;
  out << YAML::Key << "max_batches" << YAML::Value << r.eval.max_batches;
  end();
  section("checkpoint");
  out << YAML::Key << "every_steps" << YAML::Value << r.checkpoint.every_steps;
  out << YAML::Key << "keep_last" << YAML::Value << r.checkpoint.keep_last;
  out << YAML::Key << "keep_best" << YAML::Value << r.checkpoint.keep_best;
  out << YAML::Key << "best_metric" << YAML::Value
      << name_of(kBestMetricNames, r.checkpoint.best_metric);
  out << YAML::Key << "best_mode" << YAML::Value << name_of(kBestModeNames, r.checkpoint.best_mode);
  out << YAML::Key << "background" << YAML::Value << r.checkpoint.background;
  end();
  section("failure");
  out << YAML::Key << "max_restarts" << YAML::Value << r.failure.max_restarts;
  out << YAML::Key << "sigterm_grace_s" << YAML::Value << number(r.failure.sigterm_grace_s);
  end();
  out << YAML::EndMap;
  KILN_CHECK(out.good(), "recipe_to_yaml: {}", out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

}  // namespace kiln
