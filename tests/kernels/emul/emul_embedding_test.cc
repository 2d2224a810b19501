// The token embedding (embedding.cu) under the CPU emulator, against the CPU backend: rows longer
// than a block, the table in F32 and BF16, a rank's slice of a sharded table, and the backward
// over more tokens than one tile of ids, with repeated ids in every bucket.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/emul/emul_test_util.h"
#include "kiln/kernels/cuda/pointwise_ops.h"

namespace kiln::emul {
namespace {

const Backend& cpu() { return parity::reference(); }

std::vector<int32_t> token_ids(int N, int V, uint32_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(N));
  for (int n = 0; n < N; ++n) ids[n] = static_cast<int32_t>((n * 37u + seed * 11u) % V);
  return ids;
}

TEST(EmulEmbedding, ForwardF32AndBf16Tables) {
  constexpr int N = 21, C = 300, V = 50;
  const std::vector<int32_t> ids = token_ids(N, V, 1);
  const std::vector<float> wte = random_values(static_cast<size_t>(V) * C, 2);
  std::vector<float> want(static_cast<size_t>(N) * C);
  cpu().embedding_forward(want.data(), ids.data(), wte.data(), N, C);
  DeviceArray<int32_t> dids(ids, "ids");
  DeviceArray<float> dwte(wte, "wte"), out(want.size(), "out");
  emul_cuda::embedding_forward(out.get(), dids.get(), dwte.get(), N, C, nullptr);
  expect_no_fault();
  expect_close("embedding_forward f32", out.host(), want, kElementwise);
  std::vector<uint16_t> h16(wte.size());
  to_bf16(h16.data(), wte.data(), wte.size());
  DeviceArray<uint16_t> dwte16(h16, "wte bf16");
  DeviceArray<float> out16(want.size(), "out");
  emul_cuda::embedding_forward(out16.get(), dids.get(), {dwte16.get(), DType::BF16}, N, C, nullptr);
  expect_no_fault();
  expect_close("embedding_forward bf16", out16.host(), want, kElementwise);
}

// The slice [begin, begin + len) of the flattened table cuts rows in the middle.
TEST(EmulEmbedding, ForwardPartOfAShardedTable) {
  constexpr int N = 30, C = 260, V = 40;
  const std::vector<int32_t> ids = token_ids(N, V, 3);
  const size_t begin = 7 * C + 100, len = 20 * C + 33;
  const std::vector<float> part = random_values(len, 4, 1.0f);
  for (const bool round : {false, true}) {
    std::vector<float> want(static_cast<size_t>(N) * C);
    cpu().embedding_forward_part(want.data(), ids.data(), part.data(), begin, len, N, C, round);
    DeviceArray<int32_t> dids(ids, "ids");
    DeviceArray<float> dpart(part, "part"), out(want.size(), "out");
    emul_cuda::embedding_forward_part(out.get(), dids.get(), dpart.get(), begin, len, N, C, round,
                                      nullptr);
    expect_no_fault();
    expect_close(round ? "embedding_forward_part bf16" : "embedding_forward_part", out.host(), want,
                 kElementwise);
  }
}

// 300 tokens (three tiles of 128 ids), ids repeating in every bucket; the whole table and a slice.
TEST(EmulEmbedding, BackwardWholeTableAndSlice) {
  constexpr int N = 300, C = 200, V = 45;
  const std::vector<int32_t> ids = token_ids(N, V, 5);
  const std::vector<float> dout = random_values(static_cast<size_t>(N) * C, 6);
  const std::vector<float> g0 = random_values(static_cast<size_t>(V) * C, 7);
  DeviceArray<int32_t> dids(ids, "ids");
  DeviceArray<float> ddout(dout, "dout");
  {
    std::vector<float> want = g0;
    cpu().embedding_backward(want.data(), dout.data(), ids.data(), N, C);
    DeviceArray<float> g(g0, "dwte");
    emul_cuda::embedding_backward(g.get(), ddout.get(), dids.get(), 0, SIZE_MAX, N, C, nullptr);
    expect_no_fault();
    expect_close("embedding_backward", g.host(), want, kElementwise);
  }
  const size_t begin = 11 * C + 17, len = 19 * C + 5;
  std::vector<float> want(g0.begin(), g0.begin() + len);
  cpu().embedding_backward_part(want.data(), dout.data(), ids.data(), begin, len, N, C);
  DeviceArray<float> g(std::vector<float>(g0.begin(), g0.begin() + len), "dpart");
  emul_cuda::embedding_backward(g.get(), ddout.get(), dids.get(), begin, len, N, C, nullptr);
  expect_no_fault();
  expect_close("embedding_backward_part", g.host(), want, kElementwise);
}

}  // namespace
}  // namespace kiln::emul
