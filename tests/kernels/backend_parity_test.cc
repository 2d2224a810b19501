// Backend parity (as ggml's test-backend-ops): every op of kernels/ops.h on every backend under
// test (the CPU's stream emulation and CUDA, fp32 and bf16, all from make_backend()), with the
// same inputs, against the CPU reference in fp32, at the per-layer shapes of Qwen2.5-0.5B and
// 1.5B (few tokens) and at tiny shapes. CUDA cases skip, with the reason, where make_backend
// cannot make a CUDA backend. The matrix-product ops are in backend_parity_products_test.cc.
#include "backend_parity_shapes.h"

namespace kiln::parity {
namespace {

// The memory ops every other case relies on: copy_on_device (also at an offset) and fill_zero of
// part of a buffer, between uploads and a download.
TEST_P(BackendParity, CopiesAndFill) {
  const size_t n = 1027;
  const auto x = random_values(n, 0);
  expect_parity(be(), "copy_on_device, fill_zero", kExact, [&](const Backend& b) {
    DeviceScope d(b);
    float* src = d.upload(x);
    float* dst = d.upload(random_values(n, 99));
    b.copy_on_device(dst, src, n * sizeof(float));
    b.fill_zero(dst + 100, 200 * sizeof(float));
    b.copy_on_device(dst + 500, src + 3, 100 * sizeof(float));
    return Outputs{{"dst", d.download(dst, n)}};
  });
}

// Pinned host memory, and a second stream ordered after the compute stream by an event: the
// host sees the scaled values only after the copy it waited for (checked against the host).
TEST_P(BackendParity, PinnedCopiesAndStreamOrder) {
  const size_t n = 1000;
  const auto src = random_values(n, 1);
  DeviceScope d(be());
  float* a = d.upload(src);
  auto* pinned = static_cast<float*>(be().alloc_pinned(n * sizeof(float)));
  const std::unique_ptr<Stream> other = be().create_stream();
  be().scale(a, 2.0f, n);
  other->wait(be().compute_stream().record());
  other->synchronize();
  be().copy_to_host(pinned, a, n * sizeof(float));
  be().synchronize();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(pinned[i], 2.0f * src[i]) << i;
  be().free_pinned(pinned);
}

TEST_P(BackendParity, Embedding) {
  for (const LayerShape& s : layer_shapes()) {
    const int V = 37, C = s.hidden, N = kTokens + 3;
    const std::vector<int32_t> ids = {3, 0, 3, V - 1, 17, 3, 0, 36, 3};  // repeated ids
    const auto wte = random_values(static_cast<size_t>(V) * C, 1);
    const auto dout = random_values(static_cast<size_t>(N) * C, 2);
    const auto dwte0 = random_values(static_cast<size_t>(V) * C, 3, 0.1f);
    for (DType wt : {DType::F32, DType::BF16}) {
      expect_parity(be(), s.name + " embedding_forward " + std::string(dtype_name(wt)), kExact,
                    [&](const Backend& b) {
                      DeviceScope d(b);
                      float* out = d.zeros<float>(static_cast<size_t>(N) * C);
                      b.embedding_forward(out, d.upload(ids), d.upload_as(wte, wt), N, C);
                      return Outputs{{"out", d.download(out, static_cast<size_t>(N) * C)}};
                    });
    }
    // A table sharded at offsets inside rows: the parts' lookups sum to the whole table's, in
    // f32 and bf16-rounded (as a split table's lookup and a bf16 gather read it).
    const size_t VC = static_cast<size_t>(V) * C;
    const std::vector<size_t> cuts = {0, VC / 3 + 5, 2 * VC / 3 - 7, VC};
    for (bool round : {false, true}) {
      expect_parity(be(), s.name + " embedding_forward_part" + (round ? " bf16" : ""), kExact,
                    [&](const Backend& b) {
                      DeviceScope d(b);
                      const float* table = d.upload(wte);
                      std::vector<double> sum(static_cast<size_t>(N) * C, 0.0);
                      for (size_t p = 0; p + 1 < cuts.size(); ++p) {
                        float* out = d.zeros<float>(sum.size());
                        b.embedding_forward_part(out, d.upload(ids), table + cuts[p], cuts[p],
                                                 cuts[p + 1] - cuts[p], N, C, round);
                        const auto part = d.download(out, sum.size());
                        for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
                      }
                      float* whole = d.zeros<float>(sum.size());
                      b.embedding_forward(whole, d.upload(ids),
                                          d.upload_as(wte, round ? DType::BF16 : DType::F32), N, C);
                      EXPECT_EQ(sum, d.download(whole, sum.size())) << s.name;
                      return Outputs{{"sum", sum}};
                    });
    }
    // The backward into the same parts: together they make the whole table's gradient.
    expect_parity(be(), s.name + " embedding_backward_part", kExact, [&](const Backend& b) {
      DeviceScope d(b);
      float* parts = d.upload(dwte0);
      for (size_t p = 0; p + 1 < cuts.size(); ++p) {
        b.embedding_backward_part(parts + cuts[p], d.upload(dout), d.upload(ids), cuts[p],
                                  cuts[p + 1] - cuts[p], N, C);
      }
      float* whole = d.upload(dwte0);
      b.embedding_backward(whole, d.upload(dout), d.upload(ids), N, C);
      const auto got = d.download(parts, dwte0.size());
      EXPECT_EQ(got, d.download(whole, dwte0.size())) << s.name;
      return Outputs{{"dparts", got}};
    });
    expect_parity(be(), s.name + " embedding_backward", kExact, [&](const Backend& b) {
      DeviceScope d(b);
      float* dwte = d.upload(dwte0);
      b.embedding_backward(dwte, d.upload(dout), d.upload(ids), N, C);
      return Outputs{{"dwte", d.download(dwte, dwte0.size())}};
    });
  }
}

// RMSNorm forward, alone and fused with the residual add (also with sum aliasing a), for every
// weight and output dtype; N = 70 rows crosses a 64-row chunk of the CUDA dw reduction.
TEST_P(BackendParity, RmsNormForward) {
  for (const LayerShape& s : layer_shapes()) {
    for (const int N : {kTokens, 70}) {
      const int C = s.hidden;
      const size_t n = static_cast<size_t>(N) * C;
      const auto x = random_values(n, 4, 2.0f, 0.5f), r = random_values(n, 5);
      const auto w = random_values(C, 6, 0.2f, 1.0f);
      for (DType wt : {DType::F32, DType::BF16}) {
        for (DType ot : {DType::F32, DType::BF16}) {
          const std::string what = s.name + " N=" + std::to_string(N) + " w " +
                                   std::string(dtype_name(wt)) + " out " +
                                   std::string(dtype_name(ot));
          expect_parity(
              be(), "rmsnorm_forward " + what, ot == DType::BF16 ? kBf16Stored : kExact,
              [&](const Backend& b) {
                DeviceScope d(b);
                const DevPtr out = d.zeros_as(n, ot);
                float* rstd = d.zeros<float>(N);
                b.rmsnorm_forward(out, rstd, d.upload(x), d.upload_as(w, wt), N, C, 1e-6f);
                return Outputs{{"out", d.download(out, n)}, {"rstd", d.download(rstd, N)}};
              });
          for (const bool alias : {false, true}) {
            expect_parity(be(), "add_rmsnorm_forward " + what + (alias ? " sum=a" : ""),
                          ot == DType::BF16 ? kBf16Stored : kExact, [&](const Backend& b) {
                            DeviceScope d(b);
                            float* a = d.upload(x);
                            float* sum = alias ? a : d.zeros<float>(n);
                            const DevPtr out = d.zeros_as(n, ot);
                            float* rstd = d.zeros<float>(N);
                            b.add_rmsnorm_forward(sum, out, rstd, a, d.upload(r),
                                                  d.upload_as(w, wt), N, C, 1e-5f);
                            return Outputs{{"sum", d.download(sum, n)},
                                           {"out", d.download(out, n)},
                                           {"rstd", d.download(rstd, N)}};
                          });
          }
        }
      }
    }
  }
}

TEST_P(BackendParity, RmsNormBackward) {
  for (const LayerShape& s : layer_shapes()) {
    for (const int N : {kTokens, 70}) {
      const int C = s.hidden;
      const size_t n = static_cast<size_t>(N) * C;
      const auto x = random_values(n, 7, 1.5f), dout = random_values(n, 8);
      const auto w = random_values(C, 9, 0.2f, 1.0f), dw0 = random_values(C, 10);
      const auto dx0 = random_values(n, 11);
      for (DType wt : {DType::F32, DType::BF16}) {
        for (const bool accumulate : {false, true}) {
          const std::string what = s.name + " N=" + std::to_string(N) + " w " +
                                   std::string(dtype_name(wt)) + (accumulate ? " accumulate" : "");
          expect_parity(be(), "rmsnorm_backward " + what, kExact, [&](const Backend& b) {
            DeviceScope d(b);
            const float* xd = d.upload(x);
            const ConstDevPtr wd = d.upload_as(w, wt);
            float* rstd = d.zeros<float>(N);
            float* y = d.zeros<float>(n);
            b.rmsnorm_forward(y, rstd, xd, wd, N, C, 1e-6f);
            float* dx = d.upload(dx0);
            float* dw = d.upload(dw0);
            b.rmsnorm_backward(dx, dw, d.upload(dout), xd, wd, rstd, N, C, accumulate);
            return Outputs{{"dx", d.download(dx, n)}, {"dw", d.download(dw, C)}};
          });
        }
      }
    }
  }
}

// A frozen norm weight (LoRA's base): dx only, dw null.
TEST_P(BackendParity, RmsNormBackwardFrozenWeight) {
  for (const LayerShape& s : layer_shapes()) {
    const int N = 70, C = s.hidden;
    const size_t n = static_cast<size_t>(N) * C;
    const auto x = random_values(n, 7, 1.5f), dout = random_values(n, 8);
    const auto w = random_values(C, 9, 0.2f, 1.0f), dx0 = random_values(n, 11);
    expect_parity(be(), "rmsnorm_backward frozen " + s.name, kExact, [&](const Backend& b) {
      DeviceScope d(b);
      const float* xd = d.upload(x);
      float* rstd = d.zeros<float>(N);
      float* y = d.zeros<float>(n);
      b.rmsnorm_forward(y, rstd, xd, d.upload(w), N, C, 1e-6f);
      float* dx = d.upload(dx0);
      b.rmsnorm_backward(dx, nullptr, d.upload(dout), xd, d.upload(w), rstd, N, C, true);
      return Outputs{{"dx", d.download(dx, n)}};
    });
  }
}

// Qwen3's q/k norms: rmsnorm over (tokens * heads, head_dim) rows with one weight of head_dim,
// forward and backward (dw summed over every row: 70 tokens' rows cross several 64-row chunks).
TEST_P(BackendParity, RmsNormPerHead) {
  for (const LayerShape& s : layer_shapes()) {
    for (const int N : {kTokens, 70}) {
      const int rows = N * s.heads, D = s.head_dim;
      const size_t n = static_cast<size_t>(rows) * D;
      const auto x = random_values(n, 12, 1.5f), dout = random_values(n, 13);
      const auto w = random_values(D, 14, 0.2f, 1.0f);
      for (DType wt : {DType::F32, DType::BF16}) {
        const std::string what = s.name + " rows=" + std::to_string(rows) +
                                 " D=" + std::to_string(D) + " w " + std::string(dtype_name(wt));
        expect_parity(be(), "per-head rmsnorm " + what, kExact, [&](const Backend& b) {
          DeviceScope d(b);
          const float* xd = d.upload(x);
          const ConstDevPtr wd = d.upload_as(w, wt);
          float* rstd = d.zeros<float>(rows);
          float* y = d.zeros<float>(n);
          b.rmsnorm_forward(y, rstd, xd, wd, rows, D, 1e-6f);
          float* dx = d.zeros<float>(n);
          float* dw = d.zeros<float>(D);
          b.rmsnorm_backward(dx, dw, d.upload(dout), xd, wd, rstd, rows, D, false);
          return Outputs{{"y", d.download(y, n)},
                         {"rstd", d.download(rstd, rows)},
                         {"dx", d.download(dx, n)},
                         {"dw", d.download(dw, D)}};
        });
      }
    }
  }
}

TEST_P(BackendParity, Rope) {
  for (const LayerShape& s : layer_shapes()) {
    const int D = s.head_dim, N = kTokens;
    const RopeTables t = rope_tables(D);
    const std::vector<int32_t> pos = {0, 5, 1, t.max_pos - 1, 17, 2};
    for (const int heads : {s.heads, s.kv_heads}) {
      const size_t n = static_cast<size_t>(N) * heads * D;
      const auto x = random_values(n, 12), dy = random_values(n, 13);
      const std::string what = s.name + " heads=" + std::to_string(heads);
      expect_parity(be(), "rope " + what, kExact, [&](const Backend& b) {
        DeviceScope d(b);
        float* xd = d.upload(x);
        float* g = d.upload(dy);
        const int32_t* p = d.upload(pos);
        const float* cs = d.upload(t.cos);
        const float* sn = d.upload(t.sin);
        b.rope_forward(xd, p, cs, sn, N, heads, D);
        b.rope_backward(g, p, cs, sn, N, heads, D);
        return Outputs{{"x", d.download(xd, n)}, {"dx", d.download(g, n)}};
      });
    }
  }
}

// Rows of [gate | up] (the fused gate/up product's output): many rows of the layer's width, and
// one row of an odd width.
TEST_P(BackendParity, SwiGlu) {
  for (const LayerShape& s : layer_shapes()) {
    const std::pair<int, int> shapes[] = {{kTokens, s.intermediate}, {1, s.intermediate + 3}};
    for (const auto& [rows, I] : shapes) {
      const size_t n = static_cast<size_t>(rows) * I;
      const auto gate_up = random_values(2 * n, 14, 3.0f);
      const auto dh = random_values(n, 16);
      const std::string what = s.name + " " + std::to_string(rows) + "x" + std::to_string(I);
      for (DType ht : {DType::F32, DType::BF16}) {
        expect_parity(be(), "swiglu_forward " + what + " " + std::string(dtype_name(ht)),
                      ht == DType::BF16 ? kBf16Stored : kExact, [&](const Backend& b) {
                        DeviceScope d(b);
                        const DevPtr h = d.zeros_as(n, ht);
                        b.swiglu_forward(h, d.upload(gate_up), rows, I);
                        return Outputs{{"h", d.download(h, n)}};
                      });
      }
      expect_parity(be(), "swiglu_backward " + what, kExact, [&](const Backend& b) {
        DeviceScope d(b);
        float* dgate_up = d.zeros<float>(2 * n);
        b.swiglu_backward(dgate_up, d.upload(dh), d.upload(gate_up), rows, I);
        return Outputs{{"dgate_up", d.download(dgate_up, 2 * n)}};
      });
    }
  }
}

// Sizes around the float4 steps, and arrays one float off 16-byte alignment (scalar paths).
constexpr size_t kFlatSizes[] = {1, 3, 4, 5, 1027, 16384 * 2 + 7};
constexpr size_t kOffsets[] = {0, 1};

TEST_P(BackendParity, AddAndScale) {
  for (const size_t n : kFlatSizes) {
    for (const size_t off : kOffsets) {
      const auto a = random_values(n + off, 17), c = random_values(n + off, 18);
      const std::string what = "n=" + std::to_string(n) + " offset " + std::to_string(off);
      expect_parity(be(), "add " + what, kExact, [&](const Backend& b) {
        DeviceScope d(b);
        float* ad = d.upload(a) + off;
        float* cd = d.upload(c) + off;
        float* out = d.zeros<float>(n + off) + off;
        b.add(out, ad, cd, n);
        b.add(cd, ad, cd, n);  // out aliasing b
        b.scale(ad, -0.37f, n);
        return Outputs{{"out", d.download(out, n)},
                       {"b+=a", d.download(cd, n)},
                       {"scaled", d.download(ad, n)}};
      });
    }
  }
}

// Each row times its own factor (the preference head's row weights), exactly.
TEST_P(BackendParity, ScaleRows) {
  for (const auto& [n, C] : {std::pair{1, 1}, std::pair{3, 5}, std::pair{37, 896}}) {
    const auto x = random_values(static_cast<size_t>(n) * C, 19);
    const auto s = random_values(static_cast<size_t>(n), 20, 2.0f);
    expect_parity(be(), "scale_rows " + std::to_string(n) + "x" + std::to_string(C), kExact,
                  [&](const Backend& b) {
                    DeviceScope d(b);
                    float* xd = d.upload(x);
                    b.scale_rows(xd, d.upload(s), n, C);
                    return Outputs{{"x", d.download(xd, x.size())}};
                  });
  }
}

// The dropout mask is a pure function of (seed, offset + i): every backend's output is the
// reference's bit for bit, in each dtype pairing, at an unaligned start and in place (the
// backward's use).
TEST_P(BackendParity, Dropout) {
  constexpr Tolerance kBitExact{0, 0};
  const std::pair<DType, DType> pairings[] = {{DType::F32, DType::F32},
                                              {DType::BF16, DType::BF16},
                                              {DType::F32, DType::BF16},
                                              {DType::BF16, DType::F32}};
  for (const size_t n : kFlatSizes) {
    for (const size_t off : kOffsets) {
      const auto x = random_values(n + off, 28);
      for (const auto& [in, out] : pairings) {
        const std::string what = "dropout n=" + std::to_string(n) + " offset " +
                                 std::to_string(off) + " " + std::string(dtype_name(in)) + "->" +
                                 std::string(dtype_name(out));
        expect_parity(be(), what, kBitExact, [&](const Backend& b) {
          DeviceScope d(b);
          const DevPtr xd = d.upload_as(x, in).at(off);
          const DevPtr od = d.zeros_as(n + off, out).at(off);
          b.dropout(od, xd, n, 0.3f, 0x5eedull, 1000 + off);
          b.dropout(xd, xd, n, 0.6f, 0x5eedull << 33, 0);
          return Outputs{{"out", d.download(od, n)}, {"in place", d.download(xd, n)}};
        });
      }
    }
  }
}

// cast_to_bf16 rounds to nearest, ties to even, and cast_from_bf16 widens exactly: bit for bit
// the reference's values, on inputs with bits below bf16's precision (ties included) and at an
// unaligned start.
TEST_P(BackendParity, Casts) {
  constexpr Tolerance kBitExact{0, 0};
  for (const size_t n : kFlatSizes) {
    for (const size_t off : kOffsets) {
      std::vector<float> x = random_values(n + off, 19);
      const auto low = random_values(n + off, 20);
      for (size_t i = 0; i < x.size(); ++i) x[i] += x[i] * low[i] * 0x1p-9f;  // below bf16's ulp
      const float ties[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f), 0.0f, -0.0f};
      for (size_t i = 0; i < std::size(ties) && off + i < x.size(); ++i) x[off + i] = ties[i];
      const std::string what = "n=" + std::to_string(n) + " offset " + std::to_string(off);
      expect_parity(be(), "cast_to_bf16, cast_from_bf16 " + what, kBitExact, [&](const Backend& b) {
        DeviceScope d(b);
        const float* xd = d.upload(x) + off;
        uint16_t* h = d.zeros<uint16_t>(n + off) + off;
        float* back = d.zeros<float>(n + off) + off;
        b.cast_to_bf16(h, xd, n);
        b.cast_from_bf16(back, h, n);
        return Outputs{{"bf16", d.download(ConstDevPtr{h, DType::BF16}, n)},
                       {"f32", d.download(back, n)}};
      });
    }
  }
}

// copy_2d moves a column block of one row-major matrix into a column block of another (the
// q/k/v split), leaving the other columns alone: checked against the host, on every backend.
TEST_P(BackendParity, Copy2dMovesColumnBlocks) {
  const size_t rows = 5, src_cols = 11, dst_cols = 6, src_col = 3, dst_col = 1, width = 4;
  const auto src = random_values(rows * src_cols, 21);
  const auto dst0 = random_values(rows * dst_cols, 22);
  std::vector<float> want = dst0;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < width; ++c) {
      want[r * dst_cols + dst_col + c] = src[r * src_cols + src_col + c];
    }
  }
  DeviceScope d(be());
  float* dst = d.upload(dst0);
  const size_t f = sizeof(float);
  be().copy_2d(dst + dst_col, dst_cols * f, d.upload(src) + src_col, src_cols * f, width * f, rows);
  EXPECT_EQ(d.download(dst, want.size()), std::vector<double>(want.begin(), want.end()));
}

// *sum += over fixed blocks: sizes around one block of 2^14, from a non-zero start.
TEST_P(BackendParity, SumSquares) {
  for (const size_t n :
       {size_t{0}, size_t{1}, size_t{16383}, size_t{16384}, size_t{16385}, size_t{100003}}) {
    const auto x = random_values(n, 19);
    expect_parity(be(), "sum_squares n=" + std::to_string(n), {1e-12, 1e-12},
                  [&](const Backend& b) {
                    DeviceScope d(b);
                    double* sum = d.upload(std::vector<double>{0.25});
                    b.sum_squares(sum, d.upload(x), n);
                    b.sum_squares(sum, d.upload(x), n);
                    return Outputs{{"sum", d.download(sum, 1)}};
                  });
  }
}

// The norm stays on the device: a squared norm above max_norm^2 scales, one below does not.
TEST_P(BackendParity, ClipByNorm) {
  const size_t n = 1027;
  const auto g = random_values(n, 20);
  for (const double max_norm : {1.0, 100.0}) {
    expect_parity(be(), "clip_by_norm max_norm=" + std::to_string(max_norm), kExact,
                  [&](const Backend& b) {
                    DeviceScope d(b);
                    float* x = d.upload(g);
                    double* sq = d.zeros<double>(1);
                    b.sum_squares(sq, x, n);
                    b.clip_by_norm(x, n, sq, max_norm);
                    return Outputs{{"x", d.download(x, n)}};
                  });
  }
}

TEST_P(BackendParity, AdamW) {
  const AdamWStep step{
      0.9f, 0.95f, 3e-4f, 1.0f / std::sqrt(1.0f - 0.95f * 0.95f), 1e-8f, 1.0f - 3e-4f * 0.1f};
  for (const size_t n : kFlatSizes) {
    for (const size_t off : kOffsets) {
      const auto p = random_values(n + off, 21), m = random_values(n + off, 22, 0.1f);
      const auto g = random_values(n + off, 24);
      auto v = random_values(n + off, 23, 0.01f);
      for (auto& e : v) e = e * e;  // second moments are non-negative
      expect_parity(be(), "adamw_step n=" + std::to_string(n) + " offset " + std::to_string(off),
                    kExact, [&](const Backend& b) {
                      DeviceScope d(b);
                      float* pd = d.upload(p) + off;
                      float* md = d.upload(m) + off;
                      float* vd = d.upload(v) + off;
                      b.adamw_step(pd, md, vd, d.upload(g) + off, n, step);
                      b.adamw_step(pd, md, vd, d.upload(g) + off, n, step);
                      return Outputs{{"p", d.download(pd, n)},
                                     {"m", d.download(md, n)},
                                     {"v", d.download(vd, n)}};
                    });
    }
  }
}

// SGD without momentum (m null), and with momentum on the first step and after it.
TEST_P(BackendParity, Sgd) {
  const size_t n = 1027;
  const auto p = random_values(n, 25), m = random_values(n, 26), g = random_values(n, 27);
  for (const float momentum : {0.0f, 0.9f}) {
    expect_parity(be(), "sgd_step momentum=" + std::to_string(momentum), kExact,
                  [&](const Backend& b) {
                    DeviceScope d(b);
                    float* pd = d.upload(p);
                    float* md = momentum > 0 ? d.upload(m) : nullptr;
                    const float* gd = d.upload(g);
                    b.sgd_step(pd, md, gd, n, {0.1f, 0.01f, momentum, true});
                    b.sgd_step(pd, md, gd, n, {0.1f, 0.01f, momentum, false});
                    Outputs out{{"p", d.download(pd, n)}};
                    if (md != nullptr) out.push_back({"m", d.download(md, n)});
                    return out;
                  });
  }
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Backends, BackendParity,
                         ::testing::Values(ParityParam{Target::kAsyncFp32, Sizes::kAll},
                                           ParityParam{Target::kAsyncBf16, Sizes::kAll},
                                           ParityParam{Target::kCudaFp32, Sizes::kAll},
                                           ParityParam{Target::kCudaBf16, Sizes::kAll}),
                         param_name);
// The tiny sizes only: the CUDA cases (Tiny/BackendParity.<Op>/Cuda*) are what the GPU check
// runs under compute-sanitizer (scripts/gpu_check_run.sh); the CPU's stream emulation in bf16
// runs the same cases in CI.
INSTANTIATE_TEST_SUITE_P(Tiny, BackendParity,
                         ::testing::Values(ParityParam{Target::kAsyncBf16, Sizes::kTiny},
                                           ParityParam{Target::kCudaFp32, Sizes::kTiny},
                                           ParityParam{Target::kCudaBf16, Sizes::kTiny}),
                         param_name);

}  // namespace kiln::parity
