// The attention kernels (attention_flash_fwd.cu, attention_flash_bwd.cu, attention_common.cu,
// attention_reference.cu) under the CPU emulator, against the CPU backend: the flash kernels at
// head_dim 64 and 128 (tensor cores: ldmatrix and mma.sync emulated by the PTX ISA's layouts) at
// the parity suite's bf16 product tolerance, the reference kernels at its fp32 one; grouped-query
// heads, document boundaries inside and across 64-row tiles, sequences longer than a tile, the
// dK/dV pass with and without per-head parts; backward from the kernels' own y and lse.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/attention_cases.h"
#include "kernels/emul/emul_test_util.h"
#include "kiln/kernels/cuda/attention_ops.h"
#include "kiln/kernels/cuda/attention_tiling.h"

namespace kiln::emul {
namespace {

const Backend& cpu() { return parity::reference(); }

using testing::AttnCase;
using testing::AttnInputs;
using testing::AttnOutputs;
using testing::make_attn_case;

enum class Impl { kReference, kFlash };

// Forward, then backward from the kernels' own y and lse (as CudaBackend runs them).
AttnOutputs run_emulated(Impl impl, const AttnCase& c, const AttnInputs& in) {
  const AttnShape& s = c.s;
  DeviceArray<float> q(in.q, "q"), k(in.k, "k"), v(in.v, "v"), dy(in.dy, "dy");
  DeviceArray<float> y(in.q.size(), "y"), lse(size_t{1} * s.B * s.H * s.T, "lse");
  DeviceArray<float> dq(in.q.size(), "dq"), dk(in.k.size(), "dk"), dv(in.v.size(), "dv");
  DeviceArray<int32_t> ds(c.doc_start, "doc_start");
  DeviceArray<char> scratch(emul_cuda::attention_backward_scratch_bytes(s), "scratch");
  const int32_t* dsp = c.doc_start.empty() ? nullptr : ds.get();
  if (impl == Impl::kFlash) {
    emul_cuda::flash_attention_forward(y.get(), lse.get(), q.get(), k.get(), v.get(), dsp, s,
                                       nullptr);
    emul_cuda::flash_attention_backward(dq.get(), dk.get(), dv.get(), dy.get(), q.get(), k.get(),
                                        v.get(), y.get(), lse.get(), dsp, s, scratch.get(),
                                        nullptr);
  } else {
    emul_cuda::reference_attention_forward(y.get(), lse.get(), q.get(), k.get(), v.get(), dsp, s,
                                           nullptr);
    emul_cuda::reference_attention_backward(dq.get(), dk.get(), dv.get(), dy.get(), q.get(),
                                            k.get(), v.get(), y.get(), lse.get(), dsp, s,
                                            scratch.get(), nullptr);
  }
  return {y.host(), lse.host(), dq.host(), dk.host(), dv.host()};
}

void check(Impl impl, const std::string& name, const AttnCase& c) {
  const AttnInputs in(c.s, random_values);
  const AttnOutputs want = testing::attention_on(cpu(), c, in);
  const AttnOutputs got = run_emulated(impl, c, in);
  expect_no_fault();
  const double tol = impl == Impl::kFlash ? kProductBf16 : kProductFp32;
  expect_close(name + " y", got.y, want.y, tol);
  expect_close(name + " lse", got.lse, want.lse, tol);
  expect_close(name + " dq", got.dq, want.dq, tol);
  expect_close(name + " dk", got.dk, want.dk, tol);
  expect_close(name + " dv", got.dv, want.dv, tol);
}

// Grouped-query heads (2 per kv head: dK/dV in two parts, summed), documents across the 64-row
// tiles, 100 rows (a partial second tile).
TEST(EmulAttention, FlashHeadDim64GroupedQueries) {
  const AttnCase c = make_attn_case({2, 100, 4, 2, 64}, {37, 70});
  ASSERT_GT(emul_cuda::dkdv_head_splits(c.s.B, c.s.T, c.s.H, c.s.KV), 1);
  check(Impl::kFlash, "flash d64 gqa", c);
}

// Four query heads on one kv head, documents starting at a tile edge and just after one.
TEST(EmulAttention, FlashHeadDim128GroupedQueries) {
  check(Impl::kFlash, "flash d128 gqa", make_attn_case({1, 96, 4, 1, 128}, {64, 65}));
}

// One query head per kv head (dK/dV written directly), no documents, 130 rows (three tiles).
TEST(EmulAttention, FlashHeadDim64OneHeadPerKvHead) {
  const AttnCase c = make_attn_case({1, 130, 2, 2, 64}, {});
  ASSERT_EQ(emul_cuda::dkdv_head_splits(c.s.B, c.s.T, c.s.H, c.s.KV), 1);
  check(Impl::kFlash, "flash d64 mha", c);
}

// Enough kv-head blocks (128 rows x 2 kv heads) that the dK/dV pass takes two parts of each
// group of four query heads: each block loops over two heads, restaging Q and dy per head.
TEST(EmulAttention, FlashDkdvBlocksLoopingOverHeads) {
  const AttnCase c = make_attn_case({128, 16, 8, 2, 64}, {5});
  ASSERT_EQ(emul_cuda::dkdv_head_splits(c.s.B, c.s.T, c.s.H, c.s.KV), 2);
  check(Impl::kFlash, "flash d64 two heads per dk/dv block", c);
}

// The attention geometry of Qwen2.5-0.5B (14 query heads over 2 kv heads, head_dim 64) and
// Qwen2.5-1.5B (12 over 2, head_dim 128), over two and a half tiles with documents.
TEST(EmulAttention, FlashQwenGeometries) {
  check(Impl::kFlash, "flash qwen2.5-0.5b heads", make_attn_case({1, 150, 14, 2, 64}, {50, 100}));
  check(Impl::kFlash, "flash qwen2.5-1.5b heads", make_attn_case({1, 130, 12, 2, 128}, {3, 64}));
}

// The fp32 kernels for head sizes the flash kernels do not take.
TEST(EmulAttention, ReferenceOtherHeadDims) {
  check(Impl::kReference, "reference d16 gqa", make_attn_case({2, 40, 4, 2, 16}, {9, 20}));
  check(Impl::kReference, "reference d80", make_attn_case({1, 33, 2, 1, 80}, {}));
}

// New tokens over a KV cache (the reference forward at an offset).
TEST(EmulAttention, DecodeOverACache) {
  constexpr int n_q = 3, past = 21, H = 4, KV = 2, D = 32;
  const size_t rows = past + n_q;
  const std::vector<float> q = random_values(size_t{1} * n_q * H * D, 21);
  const std::vector<float> kc = random_values(rows * KV * D, 22);
  const std::vector<float> vc = random_values(rows * KV * D, 23);
  std::vector<float> want(q.size());
  cpu().attention_decode(want.data(), q.data(), kc.data(), vc.data(), n_q, past, H, KV, D);
  DeviceArray<float> dq(q, "q"), dk(kc, "k_cache"), dv(vc, "v_cache"), y(q.size(), "y");
  emul_cuda::attention_decode(y.get(), dq.get(), dk.get(), dv.get(), n_q, past, H, KV, D, nullptr);
  expect_no_fault();
  expect_close("attention_decode", y.host(), want, kProductFp32);
}

}  // namespace
}  // namespace kiln::emul
