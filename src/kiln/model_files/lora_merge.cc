#include "kiln/model_files/lora_merge.h"

#include "kiln/base/error.h"
#include "kiln/kernels/device/device_buffer.h"

namespace kiln {

namespace {
// The base weight a target adds to, in the layer's unit.
size_t base_offset(const LayerOffsets& o, LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ:
      return o.wq;
    case LoraTarget::kK:
      return o.wk;
    case LoraTarget::kV:
      return o.wv;
    case LoraTarget::kO:
      return o.wo;
    case LoraTarget::kGate:
      return o.wg;
    case LoraTarget::kUp:
      return o.wu;
    case LoraTarget::kDown:
      return o.wd;
  }
  KILN_CHECK(false, "unknown LoRA target");
  return 0;
}
}  // namespace

size_t lora_target_offset(const ParamLayout& layout, LoraTarget t) {
  return base_offset(layout.layer_offsets(), t);
}

void merge_lora(const Backend& be, const ParamLayout& layout, float* layer_params,
                const float* adapter_params) {
  const LoraOffsets& lo = layout.lora_offsets();
  const float s = static_cast<float>(layout.lora().scale());
  const int r = static_cast<int>(lo.rank);
  DeviceBuffer<float> sb(be, static_cast<size_t>(lo.max_out()) * r);  // s B_t
  for (const LoraGroup& g : lo.groups) {
    size_t b = g.b;
    for (int i = 0; i < g.ranks(); ++i) {
      const int out = static_cast<int>(g.out_size[i]), in = static_cast<int>(g.in);
      const float* a = adapter_params + g.a + static_cast<size_t>(i) * r * in;  // A_t (r, in)
      be.copy_on_device(sb.data(), adapter_params + b, sizeof(float) * out * r);
      be.scale(sb.data(), s, static_cast<size_t>(out) * r);
      // W_t (out, in) += (s B_t) (out, r) @ A_t (r, in): matmul_backward's dx, accumulated
      float* w = layer_params + base_offset(layout.layer_offsets(), g.targets[i]);
      be.matmul_backward(w, nullptr, nullptr, sb.data(), a, a, out, in, r, true);
      b += static_cast<size_t>(out) * r;
    }
  }
  be.synchronize();  // sb is freed on return
}

}  // namespace kiln
