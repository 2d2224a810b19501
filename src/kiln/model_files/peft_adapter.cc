#include "kiln/model_files/peft_adapter.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>

#include "kiln/base/atomic_dir.h"
#include "kiln/base/error.h"
#include "kiln/base/json.h"
#include "kiln/io/safetensors.h"
#include "kiln/model_files/hf_model_files.h"

namespace kiln {

namespace {

constexpr std::string_view kNamePrefix = "base_model.model.model.layers.";

// Every field of PEFT's LoraConfig kiln knows, with what it does with it. kRead: kiln reads it
// (read_peft_adapter_config); kMetadata: it changes neither the adapters' shapes nor their math,
// so any value is accepted; kDefaultOnly: kiln does not implement it, so only its default (unset:
// null, false, "", {} or []) is accepted. A field not listed is refused unless unset: a field kiln
// does not know may change what the adapter computes (alora_invocation_tokens did), and reading
// such an adapter as plain LoRA would be wrong in silence.
enum class FieldUse { kRead, kMetadata, kDefaultOnly };
struct KnownField {
  const char* field;
  FieldUse use;
  const char* what;  // for kDefaultOnly: what a set value does, for the error
};
constexpr KnownField kKnownFields[] = {
    {"peft_type", FieldUse::kRead, ""},
    {"r", FieldUse::kRead, ""},
    {"lora_alpha", FieldUse::kRead, ""},
    {"lora_dropout", FieldUse::kRead, ""},
    {"target_modules", FieldUse::kRead, ""},
    {"use_rslora", FieldUse::kRead, ""},
    {"bias", FieldUse::kRead, ""},               // "none" only: check_fields
    {"fan_in_fan_out", FieldUse::kRead, ""},     // false only: check_fields
    {"init_lora_weights", FieldUse::kRead, ""},  // plain initialisations only: check_fields
    {"base_model_name_or_path", FieldUse::kRead, ""},
    {"task_type", FieldUse::kMetadata, ""},
    {"inference_mode", FieldUse::kMetadata, ""},
    {"revision", FieldUse::kMetadata, ""},
    {"auto_mapping", FieldUse::kMetadata, ""},
    {"peft_version", FieldUse::kMetadata, ""},
    {"megatron_core", FieldUse::kMetadata, ""},      // used only with megatron_config
    {"layers_pattern", FieldUse::kMetadata, ""},     // used only with layers_to_transform
    {"qalora_group_size", FieldUse::kMetadata, ""},  // used only with use_qalora
    {"eva_config", FieldUse::kMetadata, ""},         // used only by init_lora_weights "eva"
    {"corda_config", FieldUse::kMetadata, ""},       // used only by init_lora_weights "corda"
    {"layers_to_transform", FieldUse::kDefaultOnly, "adapts only some layers"},
    {"rank_pattern", FieldUse::kDefaultOnly, "gives some modules another rank than r"},
    {"alpha_pattern", FieldUse::kDefaultOnly, "gives some modules another alpha than lora_alpha"},
    {"use_dora", FieldUse::kDefaultOnly,
     "makes it DoRA (a learned magnitude per column), not LoRA"},
    {"modules_to_save", FieldUse::kDefaultOnly,
     "trains whole modules of the base beside the adapters"},
    {"layer_replication", FieldUse::kDefaultOnly, "replicates layers of the base"},
    {"lora_bias", FieldUse::kDefaultOnly, "gives lora_B a bias"},
    {"exclude_modules", FieldUse::kDefaultOnly,
     "leaves out some of the modules target_modules names"},
    {"trainable_token_indices", FieldUse::kDefaultOnly, "trains rows of the embedding"},
    {"target_parameters", FieldUse::kDefaultOnly, "adapts parameters rather than modules"},
    {"loftq_config", FieldUse::kDefaultOnly,
     "quantises the base (LoftQ), which the adapters then correct"},
    {"megatron_config", FieldUse::kDefaultOnly, "adapts Megatron's parallel layers"},
    {"use_qalora", FieldUse::kDefaultOnly, "pools the adapters' inputs (QA-LoRA)"},
    {"alora_invocation_tokens", FieldUse::kDefaultOnly,
     "makes it an activated LoRA, applied only after its invocation tokens"},
    {"arrow_config", FieldUse::kDefaultOnly, "routes between several adapters (Arrow)"},
    {"ensure_weight_tying", FieldUse::kDefaultOnly, "ties adapted embedding and LM head modules"},
};

// init_lora_weights values that start the adapters on an unchanged base. The others (PiSSA,
// OLoRA, LoftQ, CorDA) subtract the initial adapters from the base weights, so their adapters
// apply only to that changed base.
constexpr const char* kPlainInits[] = {"gaussian", "eva"};

bool unset(const Json& v) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_string()) return v.get_ref<const std::string&>().empty();
  return (v.is_object() || v.is_array()) && v.empty();
}

// The field's value, or nullptr when the config leaves it out.
const Json* field(const Json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() ? nullptr : &*it;
}

int64_t read_rank(const Json& j, const std::string& what) {
  const Json* v = field(j, "r");
  if (!v) return 8;  // PEFT's default
  if (!v->is_number_integer() || v->get<int64_t>() <= 0)
    fail("{}: r must be a positive integer, got {}", what, v->dump());
  return v->get<int64_t>();
}

double read_number(const Json& j, const char* name, double fallback, bool (*ok)(double),
                   const char* rule, const std::string& what) {
  const Json* v = field(j, name);
  if (!v) return fallback;
  if (!v->is_number() || !ok(v->get<double>()))
    fail("{}: {} must be {}, got {}", what, name, rule, v->dump());
  return v->get<double>();
}

bool read_bool(const Json& j, const char* name, const std::string& what) {
  const Json* v = field(j, name);
  if (!v) return false;
  if (!v->is_boolean()) fail("{}: {} must be true or false, got {}", what, name, v->dump());
  return v->get<bool>();
}

// target_modules: a list of module names, or "all-linear". Any other string is a regular
// expression PEFT matches against whole module paths, which kiln does not evaluate.
std::vector<LoraTarget> read_targets(const Json& j, const std::string& what) {
  const Json* v = field(j, "target_modules");
  const std::string key = what + ": target_modules";
  if (!v || v->is_null()) fail("{} is not set; kiln needs the module names", key);
  if (v->is_string()) {
    if (v->get<std::string>() == kAllLinear) return resolve_lora_targets({kAllLinear}, key);
    fail(
        "{} is the string {}, which PEFT reads as a regular expression over module paths; "
        "kiln reads a list of module names ({}) or \"{}\"",
        key, v->dump(), allowed_names(kLoraTargetNames), kAllLinear);
  }
  if (!v->is_array() || v->empty())
    fail("{} must be a list of module names, got {}", key, v->dump());
  std::vector<std::string> names;
  for (const Json& n : *v) {
    if (!n.is_string()) fail("{} must be a list of module names, got {}", key, n.dump());
    names.push_back(n.get<std::string>());
  }
  return resolve_lora_targets(names, key);
}

const KnownField* known_field(const std::string& name) {
  for (const KnownField& k : kKnownFields)
    if (name == k.field) return &k;
  return nullptr;
}

void check_init(const Json& j, const std::string& what) {
  const Json* init = field(j, "init_lora_weights");
  if (!init || init->is_boolean() || init->is_null()) return;
  if (init->is_string()) {
    for (const char* ok : kPlainInits)
      if (*init == ok) return;
  }
  fail(
      "{}: init_lora_weights is {}: such adapters were subtracted from the base at their start, "
      "so they apply only to that changed base; kiln reads adapters of an unchanged base (PEFT "
      "converts them with path_initial_model_for_weight_conversion)",
      what, init->dump());
}

// Every field is one kiln reads, metadata, or a feature kiln does not implement left at its
// default (kKnownFields); anything else is refused naming the field.
void check_fields(const Json& j, const std::string& what) {
  for (const auto& [name, v] : j.items()) {
    const KnownField* k = known_field(name);
    if (k && k->use != FieldUse::kDefaultOnly) continue;
    if (unset(v)) continue;
    if (k)
      fail("{}: {} is {}: it {}; kiln reads plain LoRA adapters only", what, name, v.dump(),
           k->what);
    fail("{}: {} is {}: a field kiln does not implement; kiln reads plain LoRA adapters only", what,
         name, v.dump());
  }
  const Json* bias = field(j, "bias");
  if (bias && *bias != "none")
    fail("{}: bias is {}: kiln's adapters train no biases (\"none\")", what, bias->dump());
  if (read_bool(j, "fan_in_fan_out", what))
    fail(
        "{}: fan_in_fan_out is true (Conv1D-style weights, GPT-2's); kiln's models have "
        "Linear layers",
        what);
  check_init(j, what);
}

struct ParsedName {
  int64_t layer = 0;
  LoraTarget target = LoraTarget::kQ;
  LoraFactor factor = LoraFactor::kA;
};

// "base_model.model.model.layers.{i}.{self_attn|mlp}.{target}.lora_{A|B}.weight".
std::optional<ParsedName> parse_tensor_name(std::string_view name) {
  if (!name.starts_with(kNamePrefix)) return std::nullopt;
  name.remove_prefix(kNamePrefix.size());
  size_t digits = 0;
  while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
  if (digits == 0 || digits > 9 || (digits > 1 && name[0] == '0')) return std::nullopt;
  ParsedName p;
  p.layer = std::stoll(std::string(name.substr(0, digits)));
  name.remove_prefix(digits);
  if (!name.starts_with('.')) return std::nullopt;
  name.remove_prefix(1);
  for (const auto& n : kLoraTargetNames) {
    const std::string module = lora_module_path(n.value);
    if (!name.starts_with(module)) continue;
    const std::string_view rest = name.substr(module.size());
    if (rest != ".lora_A.weight" && rest != ".lora_B.weight") continue;
    p.target = n.value;
    p.factor = rest[6] == 'A' ? LoraFactor::kA : LoraFactor::kB;
    return p;
  }
  return std::nullopt;
}

const char* factor_dims(LoraFactor f) { return f == LoraFactor::kA ? "(r, in)" : "(out, r)"; }

// A factor's shape: A (r, in), B (out, r).
std::vector<int64_t> factor_shape(const ModelConfig& model, int64_t rank, LoraTarget t,
                                  LoraFactor f) {
  const LoraShape s = lora_shape(model, t);
  return f == LoraFactor::kA ? std::vector<int64_t>{rank, s.in} : std::vector<int64_t>{s.out, rank};
}

// Which factor tensor `t` of the file is, after checking that the base and the config have it
// with its shape.
ParsedName check_factor(const fs::path& file, const TensorInfo& t, const ModelConfig& model,
                        const LoraConfig& lora) {
  const auto p = parse_tensor_name(t.name);
  if (!p)
    fail(
        "{}: tensor {} is not a LoRA factor of this model (expected {}N.{{self_attn|mlp}}.<{}>"
        ".lora_{{A|B}}.weight)",
        file.string(), t.name, kNamePrefix, allowed_names(kLoraTargetNames));
  if (p->layer >= model.num_hidden_layers)
    fail("{}: tensor {} is for layer {}, but the base model has {} layers", file.string(), t.name,
         p->layer, model.num_hidden_layers);
  if (!lora.has(p->target))
    fail("{}: tensor {} adapts {}, which adapter_config.json's target_modules ({}) leaves out",
         file.string(), t.name, name_of(kLoraTargetNames, p->target),
         fmt::join(lora_target_names(lora.targets), ", "));
  const std::vector<int64_t> expected = factor_shape(model, lora.rank, p->target, p->factor);
  if (t.shape != expected)
    fail("{}: tensor {} has shape {}, expected {} {} (r {} in adapter_config.json)", file.string(),
         t.name, format_shape(t.shape), format_shape(expected), factor_dims(p->factor), lora.rank);
  return *p;
}

// Every factor of every layer and target is in the file.
void check_complete(const SafetensorsFile& st, const ModelConfig& model, const LoraConfig& lora) {
  for (int64_t l = 0; l < model.num_hidden_layers; ++l) {
    for (LoraTarget t : lora.targets) {
      for (LoraFactor f : {LoraFactor::kA, LoraFactor::kB}) {
        if (!st.find(peft_tensor_name(l, t, f)))
          fail("{}: missing tensor {} (shape {} {})", st.path().string(), peft_tensor_name(l, t, f),
               format_shape(factor_shape(model, lora.rank, t, f)), factor_dims(f));
      }
    }
  }
}

// The tensors to write, in name order (as safetensors' writer orders tensors of one dtype).
std::vector<TensorToWrite> tensors_to_write(const LoraTensors& tensors, const std::string& what) {
  std::vector<TensorToWrite> out;
  for (int64_t l = 0; l < tensors.num_layers(); ++l) {
    for (LoraTarget t : tensors.targets()) {
      for (LoraFactor f : {LoraFactor::kA, LoraFactor::kB}) {
        const std::vector<float>& v = f == LoraFactor::kA ? tensors.at(l, t).a : tensors.at(l, t).b;
        std::vector<int64_t> shape = tensors.shape(t, f);
        if (static_cast<int64_t>(v.size()) != shape[0] * shape[1])
          fail("{}: tensor {} holds {} values, expected {} {}", what, peft_tensor_name(l, t, f),
               v.size(), format_shape(shape), factor_dims(f));
        out.push_back({peft_tensor_name(l, t, f), std::move(shape), v.data()});
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const TensorToWrite& a, const TensorToWrite& b) { return a.name < b.name; });
  return out;
}

// kKilnBaseFile's fingerprint, or nullopt without the file.
std::optional<FileDigest> read_kiln_base(const fs::path& dir) {
  const fs::path path = dir / kKilnBaseFile;
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  const Json j = read_json_file(path);
  const Json* fp = j.is_object() ? field(j, "base_fingerprint") : nullptr;
  const Json* bytes = fp && fp->is_object() ? field(*fp, "bytes") : nullptr;
  const Json* hex = fp && fp->is_object() ? field(*fp, "xxh3") : nullptr;
  const auto h = hex && hex->is_string() ? parse_xxh3_hex(hex->get<std::string>()) : std::nullopt;
  if (!bytes || !bytes->is_number_unsigned() || !h)
    fail("{}: expected {{\"base_fingerprint\": {{\"bytes\": N, \"xxh3\": 16 hex digits}}}}",
         path.string());
  return FileDigest{bytes->get<uint64_t>(), *h};
}

std::string kiln_base_json(const FileDigest& base) {
  Json j = Json::object();
  j["base_fingerprint"] = {{"bytes", base.bytes}, {"xxh3", xxh3_hex(base.xxh3)}};
  j["note"] =
      "written by kiln: the fingerprint of the base model these adapters were trained on; kiln "
      "refuses to apply them to another base";
  return j.dump(2);
}

}  // namespace

void check_lora_finite(const LoraTensors& tensors, int64_t layer, const std::string& what) {
  for (LoraTarget t : tensors.targets()) {
    for (LoraFactor f : {LoraFactor::kA, LoraFactor::kB}) {
      const LoraFactors& x = tensors.at(layer, t);
      const std::vector<float>& v = f == LoraFactor::kA ? x.a : x.b;
      const auto bad = std::find_if(v.begin(), v.end(), [](float e) { return !std::isfinite(e); });
      if (bad != v.end())
        fail("{}: tensor {} holds {} at element {}: the adapter is not finite", what,
             peft_tensor_name(layer, t, f), *bad, bad - v.begin());
    }
  }
}

PeftAdapterConfig read_peft_adapter_config(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("{}: not a directory (a PEFT adapter directory)", dir.string());
  const fs::path path = dir / kPeftConfigFile;
  if (!fs::exists(path, ec))
    fail("{}: not a PEFT adapter directory (no {})", dir.string(), kPeftConfigFile);
  const std::string what = path.string();
  const Json j = read_json_file(path);
  if (!j.is_object()) fail("{}: expected a JSON object", what);
  const Json* type = field(j, "peft_type");
  if (!type) fail("{}: no peft_type (not a PEFT adapter config)", what);
  if (*type != "LORA") fail("{}: peft_type is {}; kiln reads LORA adapters", what, type->dump());
  check_fields(j, what);
  PeftAdapterConfig c;
  c.lora.rank = read_rank(j, what);
  c.lora.alpha = read_number(
      j, "lora_alpha", 8.0, [](double v) { return v > 0 && std::isfinite(v); }, "> 0", what);
  c.lora.dropout = read_number(
      j, "lora_dropout", 0.0, [](double v) { return v >= 0 && v < 1; }, "in [0, 1)", what);
  c.lora.targets = read_targets(j, what);
  c.lora.rslora = read_bool(j, "use_rslora", what);
  if (const Json* base = field(j, "base_model_name_or_path"); base && !base->is_null()) {
    if (!base->is_string())
      fail("{}: base_model_name_or_path must be a string, got {}", what, base->dump());
    c.base_model_name_or_path = base->get<std::string>();
  }
  c.base_fingerprint = read_kiln_base(dir);
  return c;
}

void check_peft_adapter_matches(const PeftAdapterConfig& adapter, const LoraConfig& lora,
                                const std::string& what) {
  const LoraConfig& a = adapter.lora;
  const auto differ = [&](const char* field, const char* key, const std::string& theirs,
                          const std::string& ours) {
    fail("{}: {} is {}, but the recipe's lora.{} is {}", what, field, theirs, key, ours);
  };
  if (a.rank != lora.rank) differ("r", "rank", std::to_string(a.rank), std::to_string(lora.rank));
  if (a.alpha != lora.alpha)
    differ("lora_alpha", "alpha", fmt::format("{}", a.alpha), fmt::format("{}", lora.alpha));
  if (a.targets != lora.targets)
    differ("target_modules", "targets",
           fmt::format("[{}]", fmt::join(lora_target_names(a.targets), ", ")),
           fmt::format("[{}]", fmt::join(lora_target_names(lora.targets), ", ")));
  if (a.rslora != lora.rslora)
    differ("use_rslora", "rslora", a.rslora ? "true" : "false", lora.rslora ? "true" : "false");
}

LoraTensors::LoraTensors(const ModelConfig& model, const LoraConfig& lora)
    : num_layers_(model.num_hidden_layers), rank_(lora.rank), targets_(lora.targets) {
  for (LoraTarget t : targets_) {
    const LoraShape s = lora_shape(model, t);
    shapes_.emplace_back(s.out, s.in);
  }
  blocks_.reserve(num_layers_ * targets_.size());
  for (int64_t l = 0; l < num_layers_; ++l) {
    for (const auto& [out, in] : shapes_) {
      blocks_.push_back({std::vector<float>(rank_ * in), std::vector<float>(out * rank_)});
    }
  }
}

size_t LoraTensors::target_index(LoraTarget t) const {
  const auto it = std::find(targets_.begin(), targets_.end(), t);
  KILN_CHECK(it != targets_.end(), "LoRA tensors: {} is not a target",
             name_of(kLoraTargetNames, t));
  return static_cast<size_t>(it - targets_.begin());
}

size_t LoraTensors::index(int64_t layer, LoraTarget t) const {
  KILN_CHECK(layer >= 0 && layer < num_layers_, "LoRA tensors: no layer {}", layer);
  return static_cast<size_t>(layer) * targets_.size() + target_index(t);
}

LoraFactors& LoraTensors::at(int64_t layer, LoraTarget t) { return blocks_[index(layer, t)]; }
const LoraFactors& LoraTensors::at(int64_t layer, LoraTarget t) const {
  return blocks_[index(layer, t)];
}

std::vector<int64_t> LoraTensors::shape(LoraTarget t, LoraFactor f) const {
  const auto [out, in] = shapes_[target_index(t)];
  return f == LoraFactor::kA ? std::vector<int64_t>{rank_, in} : std::vector<int64_t>{out, rank_};
}

PeftAdapter read_peft_adapter(const fs::path& dir, const ModelConfig& model) {
  PeftAdapter out{read_peft_adapter_config(dir), {}};
  const LoraConfig& lora = out.config.lora;
  const fs::path path = dir / kPeftWeightsFile;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    if (fs::exists(dir / "adapter_model.bin", ec))
      fail(
          "{}: only adapter_model.bin, a pickle kiln does not read; save the adapter with "
          "safe_serialization=True",
          dir.string());
    fail("{}: no such file (the adapter's weights)", path.string());
  }
  // Every name and shape checked before anything is allocated: an absurd r in the config
  // fails on the first tensor's shape, not in an allocation.
  const SafetensorsFile st(path);
  for (const TensorInfo& t : st.tensors()) check_factor(path, t, model, lora);
  check_complete(st, model, lora);
  out.tensors = LoraTensors(model, lora);
  for (const TensorInfo& t : st.tensors()) {
    const ParsedName p = *parse_tensor_name(t.name);
    LoraFactors& f = out.tensors.at(p.layer, p.target);
    st.read_f32(t, (p.factor == LoraFactor::kA ? f.a : f.b).data());
  }
  return out;
}

std::string peft_adapter_config_json(const LoraConfig& lora, const std::string& base_name) {
  std::vector<std::string> targets = lora_target_names(lora.targets);
  std::sort(targets.begin(), targets.end());  // PEFT saves a set; sorted, so a save is stable
  // Json keeps keys sorted, as save_pretrained's json.dumps(sort_keys=True) does.
  Json j = Json::object();
  j["alpha_pattern"] = Json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = base_name.empty() ? Json(nullptr) : Json(base_name);
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["layer_replication"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["loftq_config"] = Json::object();
  // PEFT's lora_alpha is an int (vLLM's PEFTHelper types it so); a fraction stays a float.
  j["lora_alpha"] = lora.alpha == std::floor(lora.alpha) && std::abs(lora.alpha) < 9e15
                        ? Json(static_cast<int64_t>(lora.alpha))
                        : Json(lora.alpha);
  j["lora_dropout"] = lora.dropout;
  j["megatron_config"] = nullptr;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = nullptr;
  j["peft_type"] = "LORA";
  j["r"] = lora.rank;
  j["rank_pattern"] = Json::object();
  j["revision"] = nullptr;
  j["target_modules"] = targets;
  j["task_type"] = "CAUSAL_LM";
  j["use_dora"] = false;
  j["use_rslora"] = lora.rslora;
  return j.dump(2, ' ', /*ensure_ascii=*/true);
}

void write_peft_adapter(const fs::path& out, const LoraConfig& lora, const std::string& base_name,
                        const LoraTensors& tensors, DType dtype, const HfModelFiles& files,
                        const std::optional<FileDigest>& base) {
  const std::string what = out.string();
  lora.validate(what);
  if (tensors.rank() != lora.rank || tensors.targets() != lora.targets)
    fail(
        "{}: the adapter tensors (rank {}, targets {}) are not the LoRA config's (rank {}, "
        "targets {})",
        what, tensors.rank(), fmt::join(lora_target_names(tensors.targets()), ", "), lora.rank,
        fmt::join(lora_target_names(lora.targets), ", "));
  const std::vector<TensorToWrite> list = tensors_to_write(tensors, what);
  for (int64_t l = 0; l < tensors.num_layers(); ++l) check_lora_finite(tensors, l, what);
  const std::string config = peft_adapter_config_json(lora, base_name);
  write_dir_atomic(out, [&](const fs::path& tmp) {
    files.write_tokenizer(tmp);
    write_safetensors(tmp / kPeftWeightsFile, list, dtype, {{"format", "pt"}});
    if (base) write_file_atomic(tmp / kKilnBaseFile, kiln_base_json(*base));
    write_file_atomic(tmp / kPeftConfigFile, config);
  });
}

}  // namespace kiln
