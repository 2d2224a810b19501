#include "kiln/model/config.h"

#include <map>

#include "kiln/base/error.h"
#include "kiln/model/phase_costs.h"

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

}  // namespace

void Qwen2Config::validate(const std::string& what) const {
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
  if (hidden_size % num_attention_heads != 0) {
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
}

Qwen2Config config_from_json(const Json& j, const std::string& what) {
  if (!j.is_object()) fail("{}: config must be a JSON object", what);
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string())
    fail("{}: missing field 'model_type' (expected \"qwen2\")", what);
  if (mt->get<std::string>() != "qwen2") {
    fail("{}: model_type is \"{}\", kiln trains Qwen2 models (model_type \"qwen2\")", what,
         mt->get<std::string>());
  }
  if (auto a = j.find("architectures"); a != j.end() && a->is_array()) {
    for (const auto& arch : *a) {
      if (!arch.is_string() || (arch != "Qwen2ForCausalLM" && arch != "Qwen2Model")) {
        fail("{}: architecture {} is not supported (expected Qwen2ForCausalLM)", what, arch.dump());
      }
    }
  }
  if (auto act = j.find("hidden_act"); act != j.end() && *act != "silu") {
    fail("{}: hidden_act {} is not supported (Qwen2 uses \"silu\")", what, act->dump());
  }
  if (auto sw = j.find("use_sliding_window");
      sw != j.end() && sw->is_boolean() && sw->get<bool>()) {
    fail("{}: use_sliding_window=true is not supported", what);
  }
  if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null()) {
    fail("{}: rope_scaling is not supported", what);
  }
  Qwen2Config c;
  c.hidden_size = get_int(j, "hidden_size", what, true, 0);
  c.intermediate_size = get_int(j, "intermediate_size", what, true, 0);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", what, true, 0);
  c.num_attention_heads = get_int(j, "num_attention_heads", what, true, 0);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", what, false, c.num_attention_heads);
  c.vocab_size = get_int(j, "vocab_size", what, true, 0);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", what, false, 32768);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", what, 1e-6);
  c.rope_theta = get_double(j, "rope_theta", what, 10000.0);
  if (auto t = j.find("tie_word_embeddings"); t != j.end()) {
    if (!t->is_boolean()) fail("{}: field 'tie_word_embeddings' must be true or false", what);
    c.tie_word_embeddings = t->get<bool>();
  } else {
    c.tie_word_embeddings = false;  // transformers' Qwen2Config default
  }
  c.validate(what);
  return c;
}

Qwen2Config read_config(const fs::path& config_json) {
  return config_from_json(read_json_file(config_json), config_json.string());
}

Json config_to_json(const Qwen2Config& c, const std::string& torch_dtype) {
  return Json{{"architectures", {"Qwen2ForCausalLM"}},
              {"model_type", "qwen2"},
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
              {"tie_word_embeddings", c.tie_word_embeddings},
              {"attention_dropout", 0.0},
              {"use_sliding_window", false},
              {"use_cache", true},
              {"bos_token_id", 151643},
              {"eos_token_id", 151643},
              {"torch_dtype", torch_dtype}};
}

namespace {
const std::map<std::string, Qwen2Config>& presets() {
  auto make = [](int64_t h, int64_t i, int64_t l, int64_t nh, int64_t kv, int64_t v, bool tie,
                 double theta, double eps) {
    Qwen2Config c;
    c.hidden_size = h;
    c.intermediate_size = i;
    c.num_hidden_layers = l;
    c.num_attention_heads = nh;
    c.num_key_value_heads = kv;
    c.vocab_size = v;
    c.tie_word_embeddings = tie;
    c.rope_theta = theta;
    c.rms_norm_eps = eps;
    c.max_position_embeddings = 32768;
    return c;
  };
  static const std::map<std::string, Qwen2Config> p = {
      {"tiny", make(64, 176, 2, 4, 2, 1024, true, 10000.0, 1e-6)},
      // Tiny models whose heads the flash attention kernels take (head_dim 64 and 128; tiny's
      // is 16, which runs the reference kernels): the GPU check's end-to-end runs.
      {"tiny-hd64", make(128, 352, 2, 2, 1, 1024, true, 10000.0, 1e-6)},
      {"tiny-hd128", make(256, 704, 2, 2, 1, 1024, true, 10000.0, 1e-6)},
      {"25m", make(384, 1024, 8, 6, 2, 32000, true, 10000.0, 1e-6)},
      // The shapes of `kiln bench train` (and bench/pytorch_train_bench.py).
      {"bench-h64", make(64, 176, 2, 4, 2, 4096, true, 10000.0, 1e-6)},
      {"bench-h512", make(512, 1408, 8, 8, 2, 151936, true, 1000000.0, 1e-6)},
      {"qwen2.5-0.5b", make(896, 4864, 24, 14, 2, 151936, true, 1000000.0, 1e-6)},
      {"qwen2.5-1.5b", make(1536, 8960, 28, 12, 2, 151936, true, 1000000.0, 1e-6)},
      {"qwen2.5-3b", make(2048, 11008, 36, 16, 2, 151936, true, 1000000.0, 1e-6)},
      {"qwen2.5-7b", make(3584, 18944, 28, 28, 4, 152064, false, 1000000.0, 1e-6)},
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

Qwen2Config preset_config(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::string list;
    for (const auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
    fail("unknown preset '{}' (presets: {})", name, list);
  }
  return it->second;
}

int64_t parameter_count(const Qwen2Config& c) {
  const int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t layer = C * c.q_dim() + c.q_dim() + 2 * (C * c.kv_dim() + c.kv_dim()) +
                        c.q_dim() * C + 3 * C * I + 2 * C;
  return V * C * (c.tie_word_embeddings ? 1 : 2) + c.num_hidden_layers * layer + C;
}

double train_flops(const Qwen2Config& c, int64_t tokens, int64_t T, int64_t head_rows) {
  const PhaseCosts p = phase_costs(c, {.tokens = tokens, .seq = T, .head_rows = head_rows});
  const auto flops = [&p](Phase phase) { return p[static_cast<int>(phase)].flops; };
  return flops(Phase::kGemm) + flops(Phase::kLmHead) + flops(Phase::kAttention);
}

}  // namespace kiln
