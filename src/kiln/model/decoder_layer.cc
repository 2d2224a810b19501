#include "kiln/model/decoder_layer.h"

namespace kiln {

void copy_qkv_columns(const Backend& be, float* qkv, float* q, float* k, float* v, int n, int Q,
                      int KV, bool to_qkv) {
  const size_t f = sizeof(float), row = static_cast<size_t>(Q + 2 * KV) * f;
  float* parts[3] = {q, k, v};
  const size_t col[3] = {0, static_cast<size_t>(Q), static_cast<size_t>(Q + KV)};
  const size_t width[3] = {Q * f, KV * f, KV * f};
  for (int i = 0; i < 3; ++i) {
    if (to_qkv) {
      be.copy_2d(qkv + col[i], row, parts[i], width[i], width[i], n);
    } else {
      be.copy_2d(parts[i], width[i], qkv + col[i], row, width[i], n);
    }
  }
}

void decoder_layer_forward(const Backend& be, const ModelConfig& c, const LayerOffsets& o,
                           ConstDevPtr w, const float* x_in, float* x_out, const DecoderActs& a,
                           const LayerGeometry& g, const RopeTables& rope,
                           const LayerAttention& attention, const LayerProduct& product) {
  const int N = g.n;
  const int C = static_cast<int>(c.hidden_size), I = static_cast<int>(c.intermediate_size);
  const int H = static_cast<int>(c.num_attention_heads);
  const int KVH = static_cast<int>(c.num_key_value_heads), D = static_cast<int>(c.head_dim());
  const int Q = H * D, KV = KVH * D;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const DType t = g.act_dtype;

  be.rmsnorm_forward(DevPtr{a.xn1, t}, a.rstd1, x_in, w.at(o.ln1), N, C, eps);
  product.forward(ProjectionGroup::kQkv, ConstDevPtr{a.xn1, t}, a.qkv);  // (N, Q + 2 KV)
  if (c.qk_norm) {
    // q (n*H, D) = rmsnorm(q_pre) per head, one weight (D) for every head; k likewise.
    copy_qkv_columns(be, a.qkv, a.q_pre, a.k_pre, a.v, N, Q, KV, /*to_qkv=*/false);
    be.rmsnorm_forward(a.q, a.rstd_q, a.q_pre, w.at(o.q_norm), N * H, D, eps);
    be.rmsnorm_forward(a.k, a.rstd_k, a.k_pre, w.at(o.k_norm), N * KVH, D, eps);
  } else {
    copy_qkv_columns(be, a.qkv, a.q, a.k, a.v, N, Q, KV, /*to_qkv=*/false);
  }
  be.rope_forward(a.q, g.pos, rope.cos(), rope.sin(), N, H, D);
  be.rope_forward(a.k, g.pos, rope.cos(), rope.sin(), N, KVH, D);
  attention.attend(a);
  product.forward(ProjectionGroup::kO, a.y, a.xmid);  // (N, C)
  be.add_rmsnorm_forward(a.xmid, DevPtr{a.xn2, t}, a.rstd2, a.xmid, x_in, w.at(o.ln2), N, C, eps);
  product.forward(ProjectionGroup::kGateUp, ConstDevPtr{a.xn2, t}, a.gate_up);  // (N, 2I)
  be.swiglu_forward(DevPtr{a.h, t}, a.gate_up, N, I);
  product.forward(ProjectionGroup::kDown, ConstDevPtr{a.h, t}, x_out);  // (N, C), or kept only
  if (x_out != nullptr) be.add(x_out, x_out, a.xmid, static_cast<size_t>(N) * C);
}

}  // namespace kiln
