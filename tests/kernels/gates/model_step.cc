#include "kernels/gates/model_step.h"

#include <algorithm>
#include <vector>

#include "kiln/data/batch.h"
#include "kiln/kernels/device/device_buffer.h"
#include "kiln/model/decoder.h"
#include "kiln/model/layout.h"
#include "kiln/model/unit_access.h"

namespace kiln::gates {

std::string largest_preset() {
  std::string best;
  size_t most = 0;
  for (const std::string& name : preset_names()) {
    const size_t n = ParamLayout(preset_config(name)).total_numel();
    if (n > most) {
      most = n;
      best = name;
    }
  }
  return best;
}

namespace {

Batch packed_batch(const ModelConfig& c, int B, int T, int doc) {
  Batch b;
  b.resize(B, T);
  const auto V = static_cast<int32_t>(c.vocab_size);
  for (int r = 0; r < B; ++r) {
    for (int t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(r) * T + t;
      b.input_ids[i] = static_cast<int32_t>((i * 7919) % V);
      b.doc_start[i] = t / doc * doc;
      b.positions[i] = t % doc;
      // The last token of each document and one in nine others take no loss.
      b.targets[i] = (t + 1) % doc == 0 || i % 9 == 4 ? kIgnoreIndex : (b.input_ids[i] + 1) % V;
    }
  }
  return b;
}

}  // namespace

void run_step(const ModelConfig& config, const Backend& be, int B, int T, int doc, bool recompute,
              int ranks) {
  Decoder model(config, be);
  ParamStore params(model.layout(), be);
  const Batch batch = packed_batch(config, B, T, std::min(doc, T));
  DeviceBuffer<double> loss(be, 1), norm(be, 1);
  const float scale = 1.0f / static_cast<float>(std::max<int64_t>(batch.num_targets(), 1));
  model.forward_backward(batch, params, scale, recompute, loss.data());
  const AdamWStep adamw{0.9f, 0.95f, 1e-4f, 1.0f, 1e-8f, 0.999f};
  const auto& units = model.layout().units();
  for (size_t u = 0; u < units.size(); ++u) {
    be.sum_squares(norm.data(), params.grad(static_cast<int>(u)), units[u].numel);
  }
  for (size_t u = 0; u < units.size(); ++u) {
    const size_t n = units[u].numel;
    DeviceBuffer<float> m(be, n), v(be, n);
    float* p = params.params(static_cast<int>(u)).data();
    be.clip_by_norm(params.grad(static_cast<int>(u)), n, norm.data(), 1.0);
    be.adamw_step(p, m.data(), v.data(), params.grad(static_cast<int>(u)), n, adamw);
    be.sgd_step(p, m.data(), params.grad(static_cast<int>(u)), n,
                SgdStep{1e-3f, 0.01f, 0.9f, false});
  }
  // FSDP's split LM head: each rank's (N, V / ranks) block of logits, rows V + 3 apart.
  const int N = B * T, V = static_cast<int>(config.vocab_size), m = V / ranks;
  DeviceBuffer<float> logits(be, static_cast<size_t>(N) * m), row_max(be, N), sums(be, 2 * N);
  DeviceBuffer<int32_t> targets(be, N);
  be.ce_part_max(row_max.data(), logits.data(), N, m, m, false);
  be.ce_part_sumexp(sums.data(), logits.data(), row_max.data(), targets.data(), 0, N, m, m);
  be.ce_part_grad(logits.data(), loss.data(), row_max.data(), sums.data(), targets.data(), 0, N, m,
                  m, scale, nullptr, 0, N);
  // A decode step of one token over a cache of T - 1.
  const int H = static_cast<int>(config.num_attention_heads);
  const int KV = static_cast<int>(config.num_key_value_heads),
            D = static_cast<int>(config.head_dim());
  DeviceBuffer<float> q(be, static_cast<size_t>(H) * D), y(be, static_cast<size_t>(H) * D);
  DeviceBuffer<float> cache(be, static_cast<size_t>(T) * KV * D);
  be.attention_decode(y.data(), q.data(), cache.data(), cache.data(), 1, T - 1, H, KV, D);
}

}  // namespace kiln::gates
