#include "kiln/model/layout.h"

#include <fmt/format.h>

#include "kiln/base/error.h"

namespace kiln {

size_t ParamUnit::add(std::string hf_name, std::vector<int64_t> shape, bool decay) {
  ParamEntry e;
  e.name = std::move(hf_name);
  e.numel = 1;
  for (int64_t d : shape) e.numel *= static_cast<size_t>(d);
  e.shape = std::move(shape);
  e.offset = numel;
  e.decay = decay;
  numel += e.numel;
  entries.push_back(std::move(e));
  return entries.back().offset;
}

const ParamEntry& ParamUnit::entry(const std::string& hf_name) const {
  for (const auto& e : entries) {
    if (e.name == hf_name) return e;
  }
  fail("unit {} has no tensor {}", name, hf_name);
}

ParamLayout::ParamLayout(const ModelConfig& c, const std::optional<LoraConfig>& lora)
    : lora_(lora) {
  if (lora_) lora_->validate("lora");
  const int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t Q = c.q_dim(), KV = c.kv_dim();
  ParamUnit embed{"embed", {}, 0};
  embed.add("model.embed_tokens.weight", {V, C}, true);
  embed.row_width = static_cast<size_t>(C);
  units_.push_back(std::move(embed));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    ParamUnit u{fmt::format("layers.{}", i), {}, 0};
    const std::string p = fmt::format("model.layers.{}.", i);
    LayerOffsets o{};
    o.ln1 = u.add(p + "input_layernorm.weight", {C}, false);
    o.wq = u.add(p + "self_attn.q_proj.weight", {Q, C}, true);
    o.wk = u.add(p + "self_attn.k_proj.weight", {KV, C}, true);
    o.wv = u.add(p + "self_attn.v_proj.weight", {KV, C}, true);
    o.bq = o.bk = o.bv = o.q_norm = o.k_norm = LayerOffsets::kNoTensor;
    if (c.attention_bias) {
      o.bq = u.add(p + "self_attn.q_proj.bias", {Q}, false);
      o.bk = u.add(p + "self_attn.k_proj.bias", {KV}, false);
      o.bv = u.add(p + "self_attn.v_proj.bias", {KV}, false);
    }
    if (c.qk_norm) {
      o.q_norm = u.add(p + "self_attn.q_norm.weight", {c.head_dim()}, false);
      o.k_norm = u.add(p + "self_attn.k_norm.weight", {c.head_dim()}, false);
    }
    o.wo = u.add(p + "self_attn.o_proj.weight", {C, Q}, true);
    o.ln2 = u.add(p + "post_attention_layernorm.weight", {C}, false);
    o.wg = u.add(p + "mlp.gate_proj.weight", {I, C}, true);
    o.wu = u.add(p + "mlp.up_proj.weight", {I, C}, true);
    o.wd = u.add(p + "mlp.down_proj.weight", {C, I}, true);
    layer_ = o;
    units_.push_back(std::move(u));
  }
  ParamUnit head{"head", {}, 0};
  head.add("model.norm.weight", {C}, false);
  head_ = static_cast<int>(units_.size());
  units_.push_back(std::move(head));
  if (!c.tie_word_embeddings) {
    ParamUnit lm_head{"lm_head", {}, 0};
    lm_head.add("lm_head.weight", {V, C}, true);
    lm_head.row_width = static_cast<size_t>(C);
    lm_head_ = static_cast<int>(units_.size());
    units_.push_back(std::move(lm_head));
  }
  lora_first_ = static_cast<int>(units_.size());
  if (!lora_) return;
  for (ParamUnit& u : units_) u.trainable = false;  // the frozen base
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    units_.push_back(kiln::lora_unit(c, *lora_, i, &lora_offsets_));
}

const LoraConfig& ParamLayout::lora() const {
  KILN_CHECK(lora_.has_value(), "the layout has no LoRA adapters");
  return *lora_;
}

const LoraOffsets& ParamLayout::lora_offsets() const {
  KILN_CHECK(lora_.has_value(), "the layout has no LoRA adapters");
  return lora_offsets_;
}

size_t ParamLayout::total_numel() const {
  size_t n = 0;
  for (const auto& u : units_) n += u.numel;
  return n;
}

size_t ParamLayout::trainable_numel() const {
  size_t n = 0;
  for (const auto& u : units_) n += u.trainable ? u.numel : 0;
  return n;
}

std::pair<int, int> ParamLayout::find(const std::string& hf_name) const {
  for (size_t u = 0; u < units_.size(); ++u) {
    for (size_t e = 0; e < units_[u].entries.size(); ++e) {
      if (units_[u].entries[e].name == hf_name) return {static_cast<int>(u), static_cast<int>(e)};
    }
  }
  return {-1, -1};
}

int64_t parameter_count(const ModelConfig& c) {
  return static_cast<int64_t>(ParamLayout(c).total_numel());
}

}  // namespace kiln
