// ParamStore under a bf16 backend: a frozen unit (a LoRA run's base) is stored in bf16 and handed
// out as it is (no copy, no allocation, the same pointer at every acquire), at half the bytes;
// load_unit and read_unit stay fp32 at the interface (rounding on load, widening on read); its
// raw buffer is refused; and the model reads from it exactly what an fp32 unit's per-acquire bf16
// copy gives.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/grad_check.h"
#include "common/small_model.h"
#include "common/test_backend.h"
#include "kiln/base/error.h"
#include "kiln/model/decoder.h"
#include "kiln/model/init.h"

namespace kiln {
namespace {

using testing::small_family_config;

LoraConfig all_linear() {
  LoraConfig l;
  l.rank = 3;
  l.alpha = 6.0;
  l.targets = resolve_lora_targets({"all-linear"}, "test");
  return l;
}

// The bf16 CPU backend, or nullptr where this CPU has no native bf16 products (its activation
// dtype is then f32 and nothing is stored in bf16).
const Backend* bf16_backend() {
  const Backend& be = testing::cpu_bf16();
  return be.activation_dtype() == DType::BF16 ? &be : nullptr;
}

TEST(ParamStore, FrozenUnitsAreStoredInBf16AndAcquiredWithoutACopy) {
  const Backend* be = bf16_backend();
  if (be == nullptr) GTEST_SKIP() << "no native bf16 products on this CPU: nothing is bf16";
  const ModelConfig c = small_family_config(ModelFamily::kQwen2, false, 4, 2);
  const ParamLayout layout(c, all_linear());
  ParamStore s(layout, *be), f(layout, testing::cpu_fp32());
  size_t adapters = 0, frozen = 0;  // elements
  for (int u = 0; u < layout.num_units(); ++u) {
    const ParamUnit& unit = layout.units()[u];
    EXPECT_EQ(s.stored(u), unit.trainable ? DType::F32 : DType::BF16) << unit.name;
    EXPECT_EQ(f.stored(u), DType::F32) << unit.name;
    (unit.trainable ? adapters : frozen) += unit.numel;
  }
  EXPECT_EQ(f.param_bytes(), 4 * (adapters + frozen));
  EXPECT_EQ(s.param_bytes(), 4 * adapters + 2 * frozen);  // even unit sizes: no padding here

  // fp32 in and out: a frozen unit comes back rounded to bf16, a trainable one as it went in.
  for (int u = 0; u < layout.num_units(); ++u) {
    const ParamUnit& unit = layout.units()[u];
    const std::vector<float> host = testing::random_vec(unit.numel, 100 + u);
    std::vector<float> back(unit.numel);
    s.load_unit(u, host.data());
    s.read_unit(u, back.data());
    size_t moved = 0;
    for (size_t i = 0; i < unit.numel; ++i) {
      const float want_i = unit.trainable ? host[i] : bf16_to_f32(f32_to_bf16(host[i]));
      ASSERT_EQ(back[i], want_i) << unit.name << " element " << i;
      moved += back[i] != host[i];
    }
    if (!unit.trainable) {
      EXPECT_GT(moved, unit.numel / 2) << unit.name;  // really rounded
    }
  }

  // A frozen unit: the stored buffer itself, every time, with nothing allocated.
  const int base = layout.layer_unit(0);
  const size_t in_use = be->memory_stats().in_use;
  const ConstDevPtr a = s.acquire(base), b = s.acquire(base);
  EXPECT_EQ(a.dtype, DType::BF16);
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(be->memory_stats().in_use, in_use);
  s.release(base);
  s.release(base);
  EXPECT_EQ(s.acquire(base).data, a.data);
  s.release(base);
  // A trainable unit (fp32 master weights) is still handed out as a bf16 copy made at acquire.
  const int adapter = layout.lora_unit(0);
  const ConstDevPtr t = s.acquire(adapter);
  EXPECT_EQ(t.dtype, DType::BF16);
  EXPECT_GT(be->memory_stats().in_use, in_use);
  s.release(adapter);

  // Raw buffers are fp32 views only: a bf16 unit's is refused, by unit and by tensor name.
  EXPECT_THROW(s.params(base), Error);
  EXPECT_THROW(s.tensor("model.layers.0.self_attn.q_proj.weight"), Error);
  EXPECT_EQ(s.params(adapter).size(), layout.units()[adapter].numel);
}

// The model over a bf16-stored frozen base (the embedding looked up from the bf16 table, the
// head and layers read as stored) computes exactly what the plain model computes from fp32 units
// rounded at each acquire: with a fresh adapter (B = 0) the losses are equal, bit for bit.
TEST(ParamStore, FrozenBf16BaseReadsWhatAnFp32UnitsCopyGives) {
  const Backend* be = bf16_backend();
  if (be == nullptr) GTEST_SKIP() << "no native bf16 products on this CPU: nothing is bf16";
  for (const bool tied : {true, false}) {
    const ModelConfig c = small_family_config(ModelFamily::kQwen3, tied, 4, 2);
    Decoder with(c, *be, all_linear()), plain(c, *be);
    ParamStore s(with.layout(), *be), p(plain.layout(), *be);
    testing::randomize(p, plain.layout(), 3);
    for (int u = 0; u < plain.layout().num_units(); ++u) {
      std::vector<float> unit(plain.layout().units()[u].numel);
      p.read_unit(u, unit.data());
      s.load_unit(u, unit.data());
    }
    init_lora_params(s, with.layout(), 1);
    const Batch batch = testing::grad_batch(2, 9, static_cast<int>(c.vocab_size), true);
    EXPECT_EQ(with.forward(batch, s), plain.forward(batch, p)) << "tied " << tied;
    s.zero_grads();
    p.zero_grads();
    EXPECT_EQ(with.forward_backward(batch, s, 0.1f, false),
              plain.forward_backward(batch, p, 0.1f, false))
        << "tied " << tied;
  }
}

}  // namespace
}  // namespace kiln
