#include "kiln/model/decoder_layer.h"

namespace kiln {

void decoder_layer_forward(const Backend& be, const Qwen2Config& c, const LayerOffsets& o,
                           ConstDevPtr w, const float* x_in, float* x_out, const DecoderActs& a,
                           const LayerGeometry& g, const RopeTables& rope,
                           const LayerAttention& attention) {
  const int N = g.n;
  const int C = static_cast<int>(c.hidden_size), I = static_cast<int>(c.intermediate_size);
  const int H = static_cast<int>(c.num_attention_heads);
  const int KVH = static_cast<int>(c.num_key_value_heads), D = static_cast<int>(c.head_dim());
  const int Q = H * D, KV = KVH * D;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const DType t = g.act_dtype;

  be.rmsnorm_forward(DevPtr{a.xn1, t}, a.rstd1, x_in, w.at(o.ln1), N, C, eps);
  be.matmul_forward(a.q, ConstDevPtr{a.xn1, t}, w.at(o.wq), w.at(o.bq), N, C, Q);
  be.matmul_forward(a.k, ConstDevPtr{a.xn1, t}, w.at(o.wk), w.at(o.bk), N, C, KV);
  be.matmul_forward(a.v, ConstDevPtr{a.xn1, t}, w.at(o.wv), w.at(o.bv), N, C, KV);
  be.rope_forward(a.q, g.pos, rope.cos(), rope.sin(), N, H, D);
  be.rope_forward(a.k, g.pos, rope.cos(), rope.sin(), N, KVH, D);
  attention.attend(a);
  be.matmul_forward(a.xmid, a.y, w.at(o.wo), nullptr, N, Q, C);
  be.add_rmsnorm_forward(a.xmid, DevPtr{a.xn2, t}, a.rstd2, a.xmid, x_in, w.at(o.ln2), N, C, eps);
  be.matmul_forward(a.gate, ConstDevPtr{a.xn2, t}, w.at(o.wg), nullptr, N, C, I);
  be.matmul_forward(a.up, ConstDevPtr{a.xn2, t}, w.at(o.wu), nullptr, N, C, I);
  be.swiglu_forward(DevPtr{a.h, t}, a.gate, a.up, static_cast<size_t>(N) * I);
  if (x_out != nullptr) {
    be.matmul_forward(x_out, ConstDevPtr{a.h, t}, w.at(o.wd), nullptr, N, I, C);
    be.add(x_out, x_out, a.xmid, static_cast<size_t>(N) * C);
  }
}

}  // namespace kiln
