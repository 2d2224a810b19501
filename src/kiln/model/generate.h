// Incremental decoding of a decoder (any family) with a KV cache, built from the backend's ops.
//
// The cache holds, per layer, K and V (capacity, kv_heads, head_dim) of every token seen so far,
// after RoPE. Feeding n new tokens at positions [past, past + n):
//   x (n, C) = embed(ids)
//   per layer: xn = rmsnorm(x); q (n, Q), k, v (n, KV) = xn W^T (+ b), k and v written straight
//              into the cache rows [past, past + n) (k through its per-head norm with qk_norm);
//              rope(q, k) with the training's tables; y = attention_decode(q, cache) (n, Q);
//              x += y Wo^T; xn = rmsnorm(x); x += (silu(xn Wg^T) * (xn Wu^T)) Wd^T
//   logits (V) = rmsnorm(x[n - 1]) W_head^T: the LM head for the last position only.
// Each layer runs the training forward's decoder_layer_forward (model/decoder_layer.h) with
// attention over the cache, so the logits equal those of a full forward over the whole sequence
// to float rounding (tested). Its projection groups are the layout's product kind, as in
// training (product_kind.h): with a LoraConfig the layout has the adapter units (layout.h) and
// each layer adds its adapters' s B A x to its base products (lora_ops.h); decoding is
// inference, so lora.dropout is not applied.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kiln/kernels/device/device_buffer.h"
#include "kiln/kernels/ops.h"
#include "kiln/model/config.h"
#include "kiln/model/layer_units.h"
#include "kiln/model/layout.h"
#include "kiln/model/lora_config.h"
#include "kiln/model/product_kind.h"
#include "kiln/model/rope_table.h"
#include "kiln/model/unit_access.h"
#include "kiln/tensor/buffer.h"

namespace kiln {

class Generator {
 public:
  // `params` must outlive the Generator; units are acquired around each use and released after,
  // as the training forward does. The cache grows as needed, up to max_position_embeddings.
  // lora: `params` holds ParamLayout(config, lora)'s units, the adapters after the base's.
  Generator(const ModelConfig& config, UnitAccess& params, const Backend& backend,
            const std::optional<LoraConfig>& lora = std::nullopt);

  // Appends `ids` (n >= 1) at positions [length(), length() + n), running them through every
  // layer in chunks and filling the cache. Returns the logits (vocab_size) of the last one, valid
  // until the next call (host memory: the one device read per call). Errors (kiln::Error) for an id
  // outside the vocabulary or a sequence longer than max_position_embeddings.
  std::span<const float> prefill(std::span<const int32_t> ids);
  // One new token; the same as prefill({token}).
  std::span<const float> step(int32_t token);

  // Tokens in the cache.
  int length() const { return length_; }
  // Forgets every cached token past the first n (0 <= n <= length()): a new prompt that shares
  // a prefix with the cached tokens (a chat's history) only runs its new part.
  void truncate(int n);
  // Bytes held by the KV cache (both K and V, every layer).
  size_t cache_bytes() const;

  const ModelConfig& config() const { return config_; }

  // Tokens per prefill chunk: bounds the activation scratch at kChunk * (3C + 2Q + 3I + 1)
  // floats (and Q + KV + H + KVH more with q/k norms, R + M more with LoRA) whatever the prompt
  // length.
  static constexpr int kChunk = 256;

 private:
  void reserve(int tokens);                   // cache and RoPE tables for positions [0, tokens)
  void run_chunk(const int32_t* ids, int n);  // n tokens at positions [length_, length_ + n)
  // x_ (n, C) through layer l, in place: w its unit's parameters, product its projections.
  void layer(int l, ConstDevPtr w, const LayerProduct& product, int n);

  ModelConfig config_;
  ParamLayout layout_;
  UnitAccess& params_;
  const Backend& be_;
  std::unique_ptr<ProductKind> products_;  // the layout's kind
  LayerUnits units_;                       // each layer's units, the product's after its own
  int length_ = 0;
  int capacity_ = 0;  // cached positions the buffers hold

  // Device memory: the cache, RoPE tables and per-chunk scratch (sized for the largest chunk run
  // so far, at most kChunk tokens), and the chunk's ids and positions, uploaded per chunk.
  std::vector<DeviceBuffer<float>> k_cache_, v_cache_;  // per layer (capacity, KV, D)
  RopeTables rope_;                                     // (capacity, D/2)
  // (n, C|C|1|Q|Q|C|Q+2KV|2I|I)
  DeviceBuffer<float> x_, xn_, rstd_, q_, y_, tmp_, qkv_, gate_up_, h_;
  // qk_norm only: q and k before their norms (n, Q + KV) and the norms' (n, H + KVH) reciprocals
  DeviceBuffer<float> qk_pre_, rstd_qk_;
  // The product kind's buffers for a chunk (ProductKind::plan, one shared by every layer).
  DeviceArena product_buffers_;
  DeviceBuffer<int32_t> ids_pos_;  // (2, kChunk)
  std::vector<int32_t> ids_pos_host_;
  DeviceBuffer<float> xf_, rstd_last_, logits_;  // (C), (1), (V)
  Buffer<float> logits_host_;                    // (V)
};

}  // namespace kiln
