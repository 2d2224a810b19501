// The decoder's configuration, read from and written to a Hugging Face config.json. One decoder
// serves every family kiln trains (Qwen2, Qwen3, Llama 3); a family is the set of options below
// (q/k/v biases, q/k norms, head_dim, RoPE frequency scaling, tied head), derived from the
// config in one place (config_from_json, family_defaults).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/json.h"

namespace kiln {

enum class ModelFamily { kQwen2, kQwen3, kLlama };

// config.json's model_type ("qwen2", "qwen3", "llama") and architecture ("Qwen2ForCausalLM", ...).
const char* model_type_name(ModelFamily f);
const char* architecture_name(ModelFamily f);

// RoPE frequency scaling (config.json's rope_scaling): none, linear (every frequency divided by
// factor) or llama3 (each frequency rescaled by its wavelength against the original context;
// rope_table.h).
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;       // llama3
};

struct ModelConfig {
  ModelFamily family = ModelFamily::kQwen2;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 32768;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1000000.0;
  bool tie_word_embeddings = false;
  // config.json's head_dim; 0: hidden_size / num_attention_heads (Qwen2.5's rule). Qwen3-0.6B:
  // hidden 1024, 16 heads of 128, so q_proj is (2048, 1024).
  int64_t head_dim_field = 0;
  bool attention_bias = true;  // q/k/v projections carry biases (Qwen2: always)
  bool qk_norm = false;        // Qwen3: RMSNorm over head_dim on each head of q and k before RoPE
  RopeScaling rope_scaling;
  int64_t bos_token_id = 151643, eos_token_id = 151643;  // written by config_to_json only

  int64_t head_dim() const {
    return head_dim_field > 0 ? head_dim_field : hidden_size / num_attention_heads;
  }
  int64_t q_dim() const { return num_attention_heads * head_dim(); }
  int64_t kv_dim() const { return num_key_value_heads * head_dim(); }

  // Checks every invariant the model relies on; errors name `what` and the field.
  void validate(const std::string& what) const;
};

// The options a family fixes, the one place they are decided: Qwen2 has q/k/v biases; Qwen3 has
// q/k norms and no biases; Llama has neither (config.json's attention_bias may add them to Qwen3
// and Llama). Sizes are left zero.
ModelConfig family_defaults(ModelFamily f);

// Parses a HF config.json object (model_type qwen2, qwen3 or llama). Missing or ill-typed fields
// and anything the model would need that kiln does not do (another rope type, a sliding window
// shorter than the context, mixture-of-experts fields, MLP biases) are errors naming `what` (the
// file), the field and its value.
ModelConfig config_from_json(const Json& j, const std::string& what);
ModelConfig read_config(const fs::path& config_json);
// A complete HF-style config.json for this model (its family's model_type and architecture).
Json config_to_json(const ModelConfig& c, const std::string& torch_dtype = "float32");

// Named shapes for `kiln init`, `kiln plan` and `kiln bench train`, one table (config.cc): the
// published Qwen2.5, Qwen3 and Llama 3.x shapes, and small ones for tests and benchmarks.
ModelConfig preset_config(const std::string& name);
std::vector<std::string> preset_names();
bool is_preset(const std::string& name);

// A parameter count in three significant figures or so, whatever its size ("1.54B", "494.0M",
// "73.7K", "96"): a LoRA run's few trainable ones never read "0.0M".
std::string parameter_count_text(int64_t n);

}  // namespace kiln
