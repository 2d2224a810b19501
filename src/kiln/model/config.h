// Qwen2 model configuration, read from and written to a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/json.h"

namespace kiln {

struct Qwen2Config {
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

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t q_dim() const { return num_attention_heads * head_dim(); }
  int64_t kv_dim() const { return num_key_value_heads * head_dim(); }

  // Checks every invariant the model relies on; errors name `what` and the field.
  void validate(const std::string& what) const;
};

// Parses a HF config.json object. Rejects configs that are not Qwen2 (model_type / architectures)
// and missing or ill-typed fields, naming `what` (the file) and the field.
Qwen2Config config_from_json(const Json& j, const std::string& what);
Qwen2Config read_config(const fs::path& config_json);
// A complete HF-style config.json for this model (model_type qwen2, Qwen2ForCausalLM).
Json config_to_json(const Qwen2Config& c, const std::string& torch_dtype = "float32");

// Named shapes for `kiln init`: tiny, tiny-hd64 and tiny-hd128 (tiny models with head_dim 64 and
// 128, the flash attention kernels' sizes), 25m, bench-h64, bench-h512 (the shapes of `kiln bench
// train`), qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b, qwen2.5-7b.
Qwen2Config preset_config(const std::string& name);
std::vector<std::string> preset_names();
bool is_preset(const std::string& name);

// Parameter count (embeddings counted once when tied).
int64_t parameter_count(const Qwen2Config& c);
// Training FLOPs for `tokens` tokens of sequence length T: 6 * matmul parameters * tokens plus
// the attention score/value products (forward 2 * 2 * T/2 * q_dim per token per layer, x3). The
// LM head counts `head_rows` rows when given (kiln computes it only for rows with a target),
// else every token.
double train_flops(const Qwen2Config& c, int64_t tokens, int64_t T, int64_t head_rows = -1);

}  // namespace kiln
