#include "kiln/model/config.h"

#include <fmt/format.h>

#include <map>

#include "kiln/base/error.h"

namespace kiln {

namespace {

int64_t get_int(const Json& j, const char* key, const std::string& what, bool required,
                int64_t def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) fail("{}: missing field '{}'", what, key);
    return def;
  }
  if (!it->is_number_integer())
    fail("{}: field '{}' must be an integer, got {}", what, key, it->dump());
  return it->get<int64_t>();
}

double get_double(const Json& j, const char* key, const std::string& what, double def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number()) fail("{}: field '{}' must be a number, got {}", what, key, it->dump());
  return it->get<double>();
}

bool get_bool(const Json& j, const char* key, const std::string& what, bool def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean())
    fail("{}: field '{}' must be true or false, got {}", what, key, it->dump());
  return it->get<bool>();
}

struct FamilyNames {
  ModelFamily family;
  const char* model_type;
  const char* architecture;
  const char* base_model;  // the *Model class some exporters name
};
constexpr FamilyNames kFamilies[] = {
    {ModelFamily::kQwen2, "qwen2", "Qwen2ForCausalLM", "Qwen2Model"},
    {ModelFamily::kQwen3, "qwen3", "Qwen3ForCausalLM", "Qwen3Model"},
    {ModelFamily::kLlama, "llama", "LlamaForCausalLM", "LlamaModel"},
};

const FamilyNames& names_of(ModelFamily f) {
  for (const auto& n : kFamilies) {
    if (n.family == f) return n;
  }
  KILN_CHECK(false, "unknown model family");
  return kFamilies[0];
}

ModelFamily family_of(const Json& j, const std::string& what) {
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string())
    fail("{}: missing field 'model_type' (expected \"qwen2\", \"qwen3\" or \"llama\")", what);
  for (const auto& n : kFamilies) {
    if (*mt != n.model_type) continue;
    if (auto a = j.find("architectures"); a != j.end() && a->is_array()) {
      for (const auto& arch : *a) {
        if (arch != n.architecture && arch != n.base_model) {
          fail("{}: architecture {} is not supported for model_type \"{}\" (expected {})", what,
               arch.dump(), n.model_type, n.architecture);
        }
      }
    }
    return n.family;
  }
  fail("{}: model_type is {}, kiln trains model_type \"qwen2\", \"qwen3\" and \"llama\"", what,
       mt->dump());
}

// rope_scaling: null, {"rope_type"|"type": "default"|"linear"|"llama3", ...}; or, as
// transformers 5 writes it, rope_parameters (the same fields and rope_theta).
RopeScaling rope_scaling_of(const Json& j, const std::string& what) {
  RopeScaling r;
  auto rs = j.find("rope_scaling");
  if (rs == j.end() || rs->is_null()) rs = j.find("rope_parameters");
  if (rs == j.end() || rs->is_null()) return r;
  if (!rs->is_object()) fail("{}: field 'rope_scaling' must be an object or null", what);
  auto type = rs->find("rope_type");
  if (type == rs->end()) type = rs->find("type");
  if (type == rs->end() || !type->is_string())
    fail("{}: field 'rope_scaling' has no rope_type", what);
  const std::string w = what + ": rope_scaling";
  if (*type == "default") return r;
  if (*type == "linear") {
    r.type = RopeScaling::Type::kLinear;
    r.factor = get_double(*rs, "factor", w, 0.0);
  } else if (*type == "llama3") {
    r.type = RopeScaling::Type::kLlama3;
    r.factor = get_double(*rs, "factor", w, 0.0);
    r.low_freq_factor = get_double(*rs, "low_freq_factor", w, 0.0);
    r.high_freq_factor = get_double(*rs, "high_freq_factor", w, 0.0);
    r.original_max_position_embeddings =
        get_int(*rs, "original_max_position_embeddings", w, true, 0);
  } else {
    fail("{}: rope_scaling.rope_type {} is not supported (kiln does \"linear\" and \"llama3\")",
         what, type->dump());
  }
  return r;
}

// What the model would need that kiln does not do: refused, naming the field and its value.
void refuse_unsupported(const Json& j, const std::string& what) {
  if (auto act = j.find("hidden_act"); act != j.end() && *act != "silu")
    fail("{}: hidden_act {} is not supported (kiln uses \"silu\")", what, act->dump());
  if (get_bool(j, "use_sliding_window", what, false)) {
    const int64_t window = get_int(j, "sliding_window", what, false, 0);
    const int64_t ctx = get_int(j, "max_position_embeddings", what, false, 0);
    if (window > 0 && window < ctx) {
      fail(
          "{}: use_sliding_window=true with sliding_window {} shorter than "
          "max_position_embeddings {} is not supported",
          what, window, ctx);
    }
  }
  for (const char* moe : {"num_experts", "num_local_experts", "num_experts_per_tok",
                          "moe_intermediate_size", "n_routed_experts"}) {
    if (auto it = j.find(moe); it != j.end() && !it->is_null() && *it != 0)
      fail("{}: field '{}' = {}: mixture-of-experts models are not supported", what, moe,
           it->dump());
  }
  if (get_bool(j, "mlp_bias", what, false))
    fail("{}: field 'mlp_bias' = true is not supported (MLP projections without biases)", what);
  if (auto f = j.find("partial_rotary_factor"); f != j.end() && !f->is_null() && *f != 1.0)
    fail("{}: field 'partial_rotary_factor' = {} is not supported", what, f->dump());
  if (auto lt = j.find("layer_types"); lt != j.end() && lt->is_array()) {
    for (const auto& t : *lt) {
      if (t != "full_attention")
        fail("{}: field 'layer_types' holds {}: only full attention is supported", what, t.dump());
    }
  }
}

// rope_theta, or rope_parameters.rope_theta (transformers 5).
double rope_theta_of(const Json& j, const std::string& what) {
  if (auto rp = j.find("rope_parameters");
      rp != j.end() && rp->is_object() && !j.contains("rope_theta"))
    return get_double(*rp, "rope_theta", what + ": rope_parameters", 10000.0);
  return get_double(j, "rope_theta", what, 10000.0);
}

}  // namespace

const char* model_type_name(ModelFamily f) { return names_of(f).model_type; }
const char* architecture_name(ModelFamily f) { return names_of(f).architecture; }

ModelConfig family_defaults(ModelFamily f) {
  ModelConfig c;
  c.family = f;
  c.attention_bias = f == ModelFamily::kQwen2;
  c.qk_norm = f == ModelFamily::kQwen3;
  if (f == ModelFamily::kLlama) {
    c.bos_token_id = 128000;
    c.eos_token_id = 128001;
  } else if (f == ModelFamily::kQwen3) {
    c.eos_token_id = 151645;
  }
  return c;
}

void ModelConfig::validate(const std::string& what) const {
  auto positive = [&](int64_t v, const char* name) {
    if (v <= 0) fail("{}: field '{}' must be positive, got {}", what, name, v);
  };
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(vocab_size, "vocab_size");
  positive(max_position_embeddings, "max_position_embeddings");
  if (head_dim_field < 0)
    fail("{}: field 'head_dim' must be positive, got {}", what, head_dim_field);
  if (head_dim_field == 0 && hidden_size % num_attention_heads != 0) {
    fail("{}: hidden_size {} is not divisible by num_attention_heads {}", what, hidden_size,
         num_attention_heads);
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    fail("{}: num_attention_heads {} is not divisible by num_key_value_heads {}", what,
         num_attention_heads, num_key_value_heads);
  }
  if (head_dim() % 2 != 0)
    fail("{}: head dimension {} must be even for rotary embeddings", what, head_dim());
  if (vocab_size > (int64_t{1} << 31) - 1) fail("{}: vocab_size {} too large", what, vocab_size);
  if (!(rms_norm_eps > 0)) fail("{}: field 'rms_norm_eps' must be positive", what);
  if (!(rope_theta > 0)) fail("{}: field 'rope_theta' must be positive", what);
  const RopeScaling& r = rope_scaling;
  if (r.type != RopeScaling::Type::kNone && !(r.factor > 0))
    fail("{}: rope_scaling.factor must be positive, got {}", what, r.factor);
  if (r.type == RopeScaling::Type::kLlama3 &&
      (!(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor) ||
       r.original_max_position_embeddings <= 0)) {
    fail(
        "{}: rope_scaling needs 0 < low_freq_factor ({}) < high_freq_factor ({}) and a positive "
        "original_max_position_embeddings ({})",
        what, r.low_freq_factor, r.high_freq_factor, r.original_max_position_embeddings);
  }
}

ModelConfig config_from_json(const Json& j, const std::string& what) {
  if (!j.is_object()) fail("{}: config must be a JSON object", what);
  const ModelFamily family = family_of(j, what);
  refuse_unsupported(j, what);
  ModelConfig c = family_defaults(family);
  c.hidden_size = get_int(j, "hidden_size", what, true, 0);
  c.intermediate_size = get_int(j, "intermediate_size", what, true, 0);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", what, true, 0);
  c.num_attention_heads = get_int(j, "num_attention_heads", what, true, 0);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", what, false, c.num_attention_heads);
  c.vocab_size = get_int(j, "vocab_size", what, true, 0);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", what, false,
                                      family == ModelFamily::kLlama ? 2048 : 32768);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", what, 1e-6);
  c.rope_theta = rope_theta_of(j, what);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", what, false);  // transformers' default
  c.head_dim_field = get_int(j, "head_dim", what, false, 0);
  // Qwen2's attention always has q/k/v biases (transformers ignores attention_bias there).
  if (family != ModelFamily::kQwen2)
    c.attention_bias = get_bool(j, "attention_bias", what, c.attention_bias);
  c.rope_scaling = rope_scaling_of(j, what);
  c.bos_token_id = get_int(j, "bos_token_id", what, false, c.bos_token_id);
  if (auto e = j.find("eos_token_id"); e != j.end() && e->is_number_integer())
    c.eos_token_id = e->get<int64_t>();
  c.validate(what);
  return c;
}

ModelConfig read_config(const fs::path& config_json) {
  return config_from_json(read_json_file(config_json), config_json.string());
}

namespace {
Json rope_scaling_json(const RopeScaling& r) {
  switch (r.type) {
    case RopeScaling::Type::kNone:
      return nullptr;
    case RopeScaling::Type::kLinear:
      return Json{{"rope_type", "linear"}, {"factor", r.factor}};
    case RopeScaling::Type::kLlama3:
      return Json{{"rope_type", "llama3"},
                  {"factor", r.factor},
                  {"low_freq_factor", r.low_freq_factor},
                  {"high_freq_factor", r.high_freq_factor},
                  {"original_max_position_embeddings", r.original_max_position_embeddings}};
  }
  return nullptr;
}
}  // namespace

Json config_to_json(const ModelConfig& c, const std::string& torch_dtype) {
  Json j{{"architectures", {architecture_name(c.family)}},
         {"model_type", model_type_name(c.family)},
         {"hidden_act", "silu"},
         {"hidden_size", c.hidden_size},
         {"intermediate_size", c.intermediate_size},
         {"num_hidden_layers", c.num_hidden_layers},
         {"num_attention_heads", c.num_attention_heads},
         {"num_key_value_heads", c.num_key_value_heads},
         {"vocab_size", c.vocab_size},
         {"max_position_embeddings", c.max_position_embeddings},
         {"rms_norm_eps", c.rms_norm_eps},
         {"rope_theta", c.rope_theta},
         {"rope_scaling", rope_scaling_json(c.rope_scaling)},
         {"tie_word_embeddings", c.tie_word_embeddings},
         {"attention_dropout", 0.0},
         {"use_sliding_window", false},
         {"use_cache", true},
         {"bos_token_id", c.bos_token_id},
         {"eos_token_id", c.eos_token_id},
         {"torch_dtype", torch_dtype}};
  if (c.family != ModelFamily::kQwen2) {
    j["head_dim"] = c.head_dim();
    j["attention_bias"] = c.attention_bias;
    if (c.family == ModelFamily::kLlama) j["mlp_bias"] = false;
  } else if (c.head_dim_field > 0) {
    j["head_dim"] = c.head_dim_field;
  }
  return j;
}

namespace {
struct PresetShape {
  ModelFamily family;
  int64_t hidden, inter, layers, heads, kv, vocab, head_dim;  // head_dim 0: hidden / heads
  bool tie;
  double theta, eps;
  int64_t max_pos;
  RopeScaling rope;
};

ModelConfig make(const PresetShape& s) {
  ModelConfig c = family_defaults(s.family);
  c.hidden_size = s.hidden;
  c.intermediate_size = s.inter;
  c.num_hidden_layers = s.layers;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv;
  c.vocab_size = s.vocab;
  c.head_dim_field = s.head_dim;
  c.tie_word_embeddings = s.tie;
  c.rope_theta = s.theta;
  c.rms_norm_eps = s.eps;
  c.max_position_embeddings = s.max_pos;
  c.rope_scaling = s.rope;
  return c;
}

RopeScaling llama3_rope(double factor) {
  return {RopeScaling::Type::kLlama3, factor, 1.0, 4.0, 8192};
}

// Every preset, one table. The published ones are the models' config.json (Qwen/Qwen2.5-*,
// Qwen/Qwen3-*, meta-llama/Llama-3.*).
const std::map<std::string, ModelConfig>& presets() {
  using F = ModelFamily;
  constexpr F Q2 = F::kQwen2, Q3 = F::kQwen3, LL = F::kLlama;
  const RopeScaling none;
  static const std::map<std::string, ModelConfig> p = {
      {"tiny", make({Q2, 64, 176, 2, 4, 2, 1024, 0, true, 1e4, 1e-6, 32768, none})},
      // Tiny models whose heads the flash attention kernels take (head_dim 64 and 128; tiny's
      // is 16, which runs the reference kernels): the GPU check's end-to-end runs.
      {"tiny-hd64", make({Q2, 128, 352, 2, 2, 1, 1024, 0, true, 1e4, 1e-6, 32768, none})},
      {"tiny-hd128", make({Q2, 256, 704, 2, 2, 1, 1024, 0, true, 1e4, 1e-6, 32768, none})},
      // Tiny Qwen3 (head_dim 64 > hidden / heads, q/k norms) and Llama 3 (llama3 RoPE scaling
      // over a short original context, so its frequencies fall in all three bands).
      {"tiny-qwen3", make({Q3, 64, 176, 2, 4, 2, 1024, 64, true, 1e4, 1e-6, 40960, none})},
      {"tiny-llama", make({LL,
                           64,
                           176,
                           2,
                           4,
                           2,
                           1024,
                           16,
                           false,
                           5e5,
                           1e-5,
                           131072,
                           {RopeScaling::Type::kLlama3, 8.0, 1.0, 4.0, 64}})},
      {"25m", make({Q2, 384, 1024, 8, 6, 2, 32000, 0, true, 1e4, 1e-6, 32768, none})},
      // The shapes of `kiln bench train` (and bench/pytorch_train_bench.py).
      {"bench-h64", make({Q2, 64, 176, 2, 4, 2, 4096, 0, true, 1e4, 1e-6, 32768, none})},
      {"bench-h512", make({Q2, 512, 1408, 8, 8, 2, 151936, 0, true, 1e6, 1e-6, 32768, none})},
      {"qwen2.5-0.5b", make({Q2, 896, 4864, 24, 14, 2, 151936, 0, true, 1e6, 1e-6, 32768, none})},
      {"qwen2.5-1.5b", make({Q2, 1536, 8960, 28, 12, 2, 151936, 0, true, 1e6, 1e-6, 32768, none})},
      {"qwen2.5-3b", make({Q2, 2048, 11008, 36, 16, 2, 151936, 0, true, 1e6, 1e-6, 32768, none})},
      {"qwen2.5-7b", make({Q2, 3584, 18944, 28, 28, 4, 152064, 0, false, 1e6, 1e-6, 32768, none})},
      {"qwen3-0.6b", make({Q3, 1024, 3072, 28, 16, 8, 151936, 128, true, 1e6, 1e-6, 40960, none})},
      {"qwen3-1.7b", make({Q3, 2048, 6144, 28, 16, 8, 151936, 128, true, 1e6, 1e-6, 40960, none})},
      {"qwen3-4b", make({Q3, 2560, 9728, 36, 32, 8, 151936, 128, true, 1e6, 1e-6, 40960, none})},
      {"qwen3-8b", make({Q3, 4096, 12288, 36, 32, 8, 151936, 128, false, 1e6, 1e-6, 40960, none})},
      {"llama-3.2-1b",
       make({LL, 2048, 8192, 16, 32, 8, 128256, 64, true, 5e5, 1e-5, 131072, llama3_rope(32.0)})},
      {"llama-3.2-3b",
       make({LL, 3072, 8192, 28, 24, 8, 128256, 128, true, 5e5, 1e-5, 131072, llama3_rope(32.0)})},
      {"llama-3.1-8b",
       make({LL, 4096, 14336, 32, 32, 8, 128256, 128, false, 5e5, 1e-5, 131072, llama3_rope(8.0)})},
  };
  return p;
}
}  // namespace

bool is_preset(const std::string& name) { return presets().count(name) != 0; }

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& [k, v] : presets()) out.push_back(k);
  return out;
}

ModelConfig preset_config(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::string list;
    for (const auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
    fail("unknown preset '{}' (presets: {})", name, list);
  }
  return it->second;
}

std::string parameter_count_text(int64_t n) {
  const auto x = static_cast<double>(n);
  if (x >= 1e9) return fmt::format("{:.2f}B", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.1f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}K", x / 1e3);
  return std::to_string(n);
}

}  // namespace kiln
