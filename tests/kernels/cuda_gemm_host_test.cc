// The host-side half of the CUDA backend's GEMMs, without a GPU: kiln's row-major linear-layer
// products (and the LM head's, chunked) for the Qwen2.5-0.5B and 1.5B layer shapes, mapped to
// cuBLASLt's column-major descriptors, read back through cublasLtMatrixLayoutGetAttribute and
// cublasLtMatmulDescGetAttribute; the shape-key cache's keys; the choice of algorithms (several
// candidates, the padded retry, the error naming the shape) with a fake heuristic; the
// cross-entropy's chunking; the backend's scratch, counted in its memory statistics (on the CPU
// backend's memory, which behaves the same for this).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "common/test_backend.h"
#include "kiln/base/error.h"
#include "kiln/kernels/cuda/cross_entropy_plan.h"
#include "kiln/kernels/cuda/cublaslt_library.h"
#include "kiln/kernels/cuda/device_scratch.h"
#include "kiln/kernels/cuda/gemm_lt.h"
#include "kiln/kernels/cuda/gemm_lt_choice.h"
#include "kiln/kernels/cuda/gemm_lt_desc.h"
#include "kiln/kernels/cuda/gpu_peak_flops.h"
#include "kiln/kernels/cuda/linear_gemms.h"
#include "kiln/kernels/cuda/stream_scratch.h"

namespace kiln::cuda {
namespace {

// What one column-major layout should say.
struct Layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};

// Attribute `a` of the cuBLASLt object `h`, read with `get` (a layout's or a matmul
// descriptor's GetAttribute); the value must fill a T exactly.
template <typename T, typename Get, typename H, typename A>
T lt_attr(Get get, H h, A a) {
  T v{};
  size_t written = 0;
  EXPECT_EQ(get(h, a, &v, sizeof v, &written), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(written, sizeof v);
  return v;
}
template <typename T>
T layout_attr(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a) {
  return lt_attr<T>(cublaslt().cublasLtMatrixLayoutGetAttribute, l, a);
}
template <typename T>
T desc_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a) {
  return lt_attr<T>(cublaslt().cublasLtMatmulDescGetAttribute, d, a);
}

void expect_layout(cublasLtMatrixLayout_t l, const Layout& want, const char* which) {
  SCOPED_TRACE(which);
  EXPECT_EQ(layout_attr<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_TYPE), static_cast<int32_t>(want.type));
  EXPECT_EQ(layout_attr<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_ORDER),
            static_cast<int32_t>(CUBLASLT_ORDER_COL));
  EXPECT_EQ(layout_attr<uint64_t>(l, CUBLASLT_MATRIX_LAYOUT_ROWS), want.rows);
  EXPECT_EQ(layout_attr<uint64_t>(l, CUBLASLT_MATRIX_LAYOUT_COLS), want.cols);
  EXPECT_EQ(layout_attr<int64_t>(l, CUBLASLT_MATRIX_LAYOUT_LD), want.ld);
}

// What the descriptors of one product should say: cuBLASLt's transposes, its A, B and C, and
// the epilogue.
struct Expected {
  cublasOperation_t transa, transb;
  Layout a, b, c;
  cublasLtEpilogue_t epilogue;
};

void expect_descriptors(const GemmSpec& s, const Expected& e) {
  SCOPED_TRACE(describe(s));
  const LtDescriptors d = make_lt_descriptors(s);
  EXPECT_EQ(desc_attr<int32_t>(d.op.get(), CUBLASLT_MATMUL_DESC_COMPUTE_TYPE),
            static_cast<int32_t>(CUBLAS_COMPUTE_32F));  // never _FAST_TF32 / _FAST_16BF
  EXPECT_EQ(desc_attr<int32_t>(d.op.get(), CUBLASLT_MATMUL_DESC_SCALE_TYPE),
            static_cast<int32_t>(CUDA_R_32F));
  EXPECT_EQ(desc_attr<int32_t>(d.op.get(), CUBLASLT_MATMUL_DESC_TRANSA),
            static_cast<int32_t>(e.transa));
  EXPECT_EQ(desc_attr<int32_t>(d.op.get(), CUBLASLT_MATMUL_DESC_TRANSB),
            static_cast<int32_t>(e.transb));
  EXPECT_EQ(desc_attr<uint32_t>(d.op.get(), CUBLASLT_MATMUL_DESC_EPILOGUE),
            static_cast<uint32_t>(e.epilogue));
  if (e.epilogue == CUBLASLT_EPILOGUE_BIAS) {
    EXPECT_EQ(desc_attr<int32_t>(d.op.get(), CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE),
              static_cast<int32_t>(CUDA_R_32F));
  }
  expect_layout(d.a.get(), e.a, "cuBLASLt A (kiln's B)");
  expect_layout(d.b.get(), e.b, "cuBLASLt B (kiln's A)");
  expect_layout(d.c.get(), e.c, "C = D");
}

// A linear layer of a model: y (N, OC) = x (N, IC) @ w^T (+ b).
struct Linear {
  const char* name;
  int IC, OC;
  bool bias;
};

// Qwen2.5 decoder layers (config.json: hidden_size, num_attention_heads x head_dim,
// num_key_value_heads x head_dim, intermediate_size; q/k/v carry biases) and the tied LM head
// (vocab 151936).
std::vector<Linear> qwen_linears(int C, int H, int KV, int D, int I, int V) {
  return {{"q_proj", C, H * D, true},  {"k_proj", C, KV * D, true}, {"v_proj", C, KV * D, true},
          {"o_proj", H * D, C, false}, {"gate_proj", C, I, false},  {"up_proj", C, I, false},
          {"down_proj", I, C, false},  {"lm_head", C, V, false}};
}

// The column-major descriptors each product must have, derived by hand from the row-major
// shapes: a row-major (r, c) matrix with row stride ld is column-major (c, r) with ld.
void check_linear(const Linear& l, int N, DType inputs) {
  SCOPED_TRACE(l.name);
  const cudaDataType_t in = inputs == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  const auto u = [](int v) { return static_cast<uint64_t>(v); };
  // Forward: D (OC, N) = op_T(w: (IC, OC)) @ x (IC, N).
  expect_descriptors(linear_forward_spec(N, l.IC, l.OC, inputs, l.bias),
                     {CUBLAS_OP_T,
                      CUBLAS_OP_N,
                      {in, u(l.IC), u(l.OC), l.IC},
                      {in, u(l.IC), u(N), l.IC},
                      {CUDA_R_32F, u(l.OC), u(N), l.OC},
                      l.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT});
  // dx: D (IC, N) = w (IC, OC) @ dy (OC, N).
  expect_descriptors(linear_dx_spec(N, l.IC, l.OC, inputs, true),
                     {CUBLAS_OP_N,
                      CUBLAS_OP_N,
                      {in, u(l.IC), u(l.OC), l.IC},
                      {in, u(l.OC), u(N), l.OC},
                      {CUDA_R_32F, u(l.IC), u(N), l.IC},
                      CUBLASLT_EPILOGUE_DEFAULT});
  // dw: D (IC, OC) += x (IC, N) @ op_T(dy: (OC, N)).
  expect_descriptors(linear_dw_spec(N, l.IC, l.OC, inputs), {CUBLAS_OP_N,
                                                             CUBLAS_OP_T,
                                                             {in, u(l.IC), u(N), l.IC},
                                                             {in, u(l.OC), u(N), l.OC},
                                                             {CUDA_R_32F, u(l.IC), u(l.OC), l.IC},
                                                             CUBLASLT_EPILOGUE_DEFAULT});
}

TEST(CudaGemmHost, Qwen25_0_5B_LayerShapes) {
  for (const DType inputs : {DType::F32, DType::BF16}) {
    for (const Linear& l : qwen_linears(896, 14, 2, 64, 4864, 151936))
      check_linear(l, 4096, inputs);
  }
}

TEST(CudaGemmHost, Qwen25_1_5B_LayerShapes) {
  for (const DType inputs : {DType::F32, DType::BF16}) {
    for (const Linear& l : qwen_linears(1536, 12, 2, 128, 8960, 151936)) {
      check_linear(l, 2048, inputs);
    }
  }
}

TEST(CudaGemmHost, LmHeadChunkShapes) {
  // The cross-entropy's products are the LM head's linear products over one chunk of rows.
  const CePlan p = ce_plan(8192, 151936);
  check_linear({"lm_head chunk", 1536, 151936, false}, p.chunk_rows, DType::BF16);
}

// cuBLASLt's definition of the matmul, on the host: D (m, n) = op(A) @ op(B) + beta * C (+ bias
// per row of D), every matrix column-major with its leading dimension; element (i, j) of a
// column-major matrix is p[i + j * ld].
void lt_reference(const LtProblem& p, const float* A, const float* B, float beta, float* C,
                  const float* bias) {
  const auto op_a = [&](uint64_t i, uint64_t l) {  // op(A) (m, k)
    return p.transa == CUBLAS_OP_N ? A[i + l * p.lda] : A[l + i * p.lda];
  };
  const auto op_b = [&](uint64_t l, uint64_t j) {  // op(B) (k, n)
    return p.transb == CUBLAS_OP_N ? B[l + j * p.ldb] : B[j + l * p.ldb];
  };
  for (uint64_t j = 0; j < p.n; ++j) {
    for (uint64_t i = 0; i < p.m; ++i) {
      double acc = 0;
      for (uint64_t l = 0; l < p.k; ++l) acc += double{op_a(i, l)} * op_b(l, j);
      float& d = C[i + j * p.ldc];
      d = static_cast<float>(acc + beta * d + (bias != nullptr ? bias[i] : 0.0f));
    }
  }
}

// The swap of operands, transposes and dimensions, checked by what it computes: cuBLASLt's
// matmul over lt_problem(spec), given kiln's B as its A and kiln's A as its B, is kiln's
// row-major C = op(A) @ op(B) (+ bias per column) (+ C), for all four transpositions with row
// strides wider than the rows.
TEST(CudaGemmHost, ColumnMajorViewComputesTheRowMajorProduct) {
  const int M = 5, N = 7, K = 3, pad = 2;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      for (const bool bias : {false, true}) {
        const GemmSpec s{.trans_a = ta,
                         .trans_b = tb,
                         .M = M,
                         .N = N,
                         .K = K,
                         .lda = (ta ? M : K) + pad,
                         .ldb = (tb ? K : N) + pad,
                         .ldc = N + pad,
                         .inputs = DType::F32,
                         .bias = bias,
                         .accumulate = true};
        SCOPED_TRACE(describe(s));
        std::vector<float> A((ta ? K : M) * s.lda), B((tb ? N : K) * s.ldb), C(M * s.ldc), b(N);
        for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(i % 7) - 3.0f;
        for (size_t i = 0; i < B.size(); ++i) B[i] = static_cast<float>(i % 5) - 2.0f;
        for (size_t i = 0; i < C.size(); ++i) C[i] = static_cast<float>(i % 3);
        for (int i = 0; i < N; ++i) b[i] = 0.5f * static_cast<float>(i);
        // Row-major, by definition: C[r][c] += sum_l op(A)[r][l] * op(B)[l][c] + b[c].
        std::vector<float> want = C;
        for (int r = 0; r < M; ++r) {
          for (int c = 0; c < N; ++c) {
            double acc = 0;
            for (int l = 0; l < K; ++l) {
              const float a = ta ? A[l * s.lda + r] : A[r * s.lda + l];
              const float bb = tb ? B[c * s.ldb + l] : B[l * s.ldb + c];
              acc += double{a} * bb;
            }
            want[r * s.ldc + c] += static_cast<float>(acc + (bias ? b[c] : 0.0f));
          }
        }
        std::vector<float> got = C;
        lt_reference(lt_problem(s), B.data(), A.data(), 1.0f, got.data(),
                     bias ? b.data() : nullptr);
        for (int r = 0; r < M; ++r) {
          for (int c = 0; c < N; ++c)
            EXPECT_EQ(got[r * s.ldc + c], want[r * s.ldc + c]) << r << "," << c;
        }
      }
    }
  }
}

TEST(CudaGemmHost, SpecsThemselves) {
  const GemmSpec f = linear_forward_spec(7, 5, 3, DType::BF16, true);
  EXPECT_FALSE(f.trans_a);
  EXPECT_TRUE(f.trans_b);
  EXPECT_EQ(f.M, 7);
  EXPECT_EQ(f.N, 3);
  EXPECT_EQ(f.K, 5);
  EXPECT_FALSE(f.accumulate);
  EXPECT_TRUE(linear_dw_spec(7, 5, 3, DType::F32).accumulate);  // parameter gradients +=
  EXPECT_FALSE(linear_dx_spec(7, 5, 3, DType::F32, false).accumulate);
  EXPECT_TRUE(linear_dx_spec(7, 5, 3, DType::F32, true).accumulate);
}

TEST(CudaGemmHost, RejectsBadSpecs) {
  GemmSpec s = linear_forward_spec(4, 8, 16, DType::F32, false);
  s.lda = 7;  // x is (4, 8): rows of 8
  EXPECT_THROW(make_lt_descriptors(s), Error);
  s = linear_forward_spec(4, 8, 16, DType::F16, false);
  EXPECT_THROW(make_lt_descriptors(s), Error);
  s = linear_forward_spec(0, 8, 16, DType::F32, false);
  EXPECT_THROW(make_lt_descriptors(s), Error);
}

TEST(CudaGemmHost, ShapeKeys) {
  const GemmSpec s = linear_forward_spec(4096, 896, 128, DType::BF16, true);
  const GemmKey a{s, 256, 256, 256, 256};
  GemmKey b = a;
  EXPECT_EQ(a, b);
  EXPECT_EQ(GemmKeyHash{}(a), GemmKeyHash{}(b));
  b.align_a = 16;  // an operand at an offset may need another algorithm
  EXPECT_FALSE(a == b);
  b = a;
  b.spec.accumulate = true;  // beta is part of the key
  EXPECT_FALSE(a == b);
  b = a;
  b.spec.inputs = DType::F32;
  EXPECT_FALSE(a == b);
  EXPECT_NE(GemmKeyHash{}(a), GemmKeyHash{}(b));
}

TEST(CudaGemmHost, PointerAlignment) {
  EXPECT_EQ(pointer_alignment(nullptr), 256);
  EXPECT_EQ(pointer_alignment(reinterpret_cast<const void*>(uintptr_t{0x10000})), 256);
  EXPECT_EQ(pointer_alignment(reinterpret_cast<const void*>(uintptr_t{0x10040})), 64);
  EXPECT_EQ(pointer_alignment(reinterpret_cast<const void*>(uintptr_t{0x10002})), 2);
}

TEST(CudaGemmHost, MisalignedBiasIsRefusedBeforeAnyGpuCall) {
  // cuBLASLt has no alignment preference for the epilogue bias, so run() refuses one that is not
  // 16-byte aligned (a q/k/v bias at an odd float offset of a flat unit) before it touches a GPU;
  // CudaBackend copies such a bias into aligned scratch first.
  LtGemm g(testing::cpu_fp32());
  const GemmSpec s = linear_forward_spec(4, 8, 6, DType::F32, true);
  const auto* misaligned = reinterpret_cast<const float*>(uintptr_t{0x10004});
  const auto* fake = reinterpret_cast<const float*>(uintptr_t{0x10000});
  // (Without the check, run() would fail later, in cublasLtCreate: the message tells them apart.)
  try {
    g.run(s, fake, fake, const_cast<float*>(fake), misaligned, nullptr);
    ADD_FAILURE() << "a misaligned bias was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("16-byte aligned"), std::string::npos) << e.what();
  }
  EXPECT_EQ(g.cached_plans(), 0u);
  EXPECT_LT(pointer_alignment(misaligned), kLtBiasAlignment);
}

TEST(CudaGemmHost, NoGpuTouchedBeforeTheFirstGemm) {
  // cublasLtCreate fails without a driver (CUBLAS_STATUS_NOT_INITIALIZED); the handle and the
  // workspace are made by the first run(), so an LtGemm is built and destroyed anywhere.
  const LtGemm g(testing::cpu_fp32());
  EXPECT_EQ(g.cached_plans(), 0u);
}

TEST(CudaCrossEntropyPlan, Chunks) {
  // 151936 fp32 logits per row: 256 MiB hold 441 rows, rounded down to 432 (16s).
  const int V = 151936;
  CePlan p = ce_plan(4096, V);
  EXPECT_EQ(p.chunks, 10);
  EXPECT_EQ(p.chunk_rows % 16, 0);
  EXPECT_LE(static_cast<size_t>(p.chunk_rows) * V * sizeof(float), kCeLogitsBudgetBytes);
  EXPECT_GE(p.padded_rows(), 4096);
  EXPECT_LT(p.padded_rows() - 4096, 16 * p.chunks);
  // Few rows: one chunk of exactly N.
  p = ce_plan(100, V);
  EXPECT_EQ(p.chunks, 1);
  EXPECT_EQ(p.chunk_rows, 100);
  // A huge vocabulary still gets kCeMinChunkRows rows per chunk.
  p = ce_plan(1000, 4 << 20);
  EXPECT_EQ(p.chunk_rows % 16, 0);
  EXPECT_GE(p.chunk_rows, kCeMinChunkRows);
  EXPECT_GE(p.padded_rows(), 1000);
  // No rows, no chunks.
  EXPECT_EQ(ce_plan(0, V).chunks, 0);
}

// ---- Choosing algorithms (gemm_lt_choice.h) ----

// A distinct fake algorithm per candidate index.
cublasLtMatmulAlgo_t fake_algo(uint64_t tag) {
  cublasLtMatmulAlgo_t a{};
  a.data[0] = tag;
  return a;
}

// A fake heuristic: `n` candidates when every row is a multiple of 16 bytes and every pointer
// 16-byte aligned, none otherwise; records what it was asked.
struct RowAlignedHeuristic {
  int n = 3;
  std::vector<GemmKey> asked;
  std::vector<cublasLtMatmulAlgo_t> operator()(const GemmKey& k) {
    asked.push_back(k);
    std::vector<cublasLtMatmulAlgo_t> out;
    if (!rows_are_padded(k.spec) || k.align_a < 16 || k.align_b < 16 || k.align_c < 16) return out;
    for (int i = 0; i < n; ++i) out.push_back(fake_algo(100 + i));
    return out;
  }
};

TEST(CudaGemmChoice, PaddedKeyRoundsRowsTo16Bytes) {
  // The parity suite's tiny layer in bf16: hidden 8 (16 bytes), intermediate 12 (24 bytes).
  const GemmKey down{linear_forward_spec(6, 12, 8, DType::BF16, false), 2, 8, 4, 256};
  EXPECT_FALSE(rows_are_padded(down.spec));
  const GemmKey p = padded_key(down);
  EXPECT_EQ(p.spec.lda, 16);  // 12 bf16 -> 16 (32 bytes)
  EXPECT_EQ(p.spec.ldb, 16);
  EXPECT_EQ(p.spec.ldc, 8);  // 8 fp32 = 32 bytes already
  EXPECT_EQ(p.align_a, 256);
  EXPECT_EQ(p.align_b, 256);
  EXPECT_EQ(p.align_c, 256);
  EXPECT_EQ(p.align_bias, down.align_bias);
  EXPECT_TRUE(rows_are_padded(p.spec));
  // The shape itself is unchanged, and make_lt_descriptors takes the padded strides.
  EXPECT_EQ(p.spec.M, down.spec.M);
  EXPECT_EQ(p.spec.N, down.spec.N);
  EXPECT_EQ(p.spec.K, down.spec.K);
  EXPECT_NO_THROW(make_lt_descriptors(p.spec));
  // A cross-entropy chunk with C = 4 in fp32 and V = 300: rows of 16 and 1200 bytes, nothing
  // to pad; V = 301 pads the logits' rows (C) to 304 floats.
  const GemmKey ce{linear_forward_spec(5, 4, 300, DType::F32, false), 256, 256, 256, 256};
  EXPECT_EQ(padded_key(ce).spec, ce.spec);
  EXPECT_EQ(
      padded_key({linear_forward_spec(5, 4, 301, DType::F32, false), 256, 256, 256, 256}).spec.ldc,
      304);
  // bf16, C = 4: rows of 8 bytes.
  const GemmSpec ce16 = linear_forward_spec(5, 4, 300, DType::BF16, false);
  EXPECT_EQ(padded_key({ce16, 256, 256, 256, 256}).spec.lda, 8);
}

TEST(CudaGemmChoice, SeveralCandidatesAtTheOperandsAlignment) {
  RowAlignedHeuristic h;
  const GemmKey key{linear_forward_spec(64, 896, 128, DType::BF16, true), 256, 64, 256, 16};
  const LtChoice c = choose_lt_algorithms(key, std::ref(h));
  EXPECT_FALSE(c.padded);
  EXPECT_EQ(c.run, key);
  ASSERT_EQ(c.algos.size(), 3u);
  EXPECT_EQ(c.algos[0].data[0], 100u);  // best first, as the heuristic gave them
  EXPECT_EQ(c.algos[2].data[0], 102u);
  ASSERT_EQ(h.asked.size(), 1u);
  EXPECT_EQ(h.asked[0], key);
}

TEST(CudaGemmChoice, NoAlgorithmRetriesOnPaddedCopies) {
  RowAlignedHeuristic h;
  const GemmKey key{linear_forward_spec(6, 12, 8, DType::BF16, false), 256, 256, 256, 256};
  const LtChoice c = choose_lt_algorithms(key, std::ref(h));
  EXPECT_TRUE(c.padded);
  EXPECT_EQ(c.run, padded_key(key));
  EXPECT_EQ(c.algos.size(), 3u);
  ASSERT_EQ(h.asked.size(), 2u);  // as given, then padded
  EXPECT_EQ(h.asked[1], padded_key(key));
  // An operand at a 4-byte offset (a slice of a flat unit) is also copied.
  const GemmKey offset{linear_forward_spec(6, 16, 8, DType::BF16, false), 4, 256, 256, 256};
  EXPECT_TRUE(choose_lt_algorithms(offset, RowAlignedHeuristic{}).padded);
}

TEST(CudaGemmChoice, NoneAtAllNamesTheShape) {
  const auto never = [](const GemmKey&) { return std::vector<cublasLtMatmulAlgo_t>{}; };
  const GemmKey odd{linear_forward_spec(6, 12, 8, DType::BF16, false), 256, 256, 256, 256};
  const std::string m = testing::error_of([&] { choose_lt_algorithms(odd, never); });
  EXPECT_NE(m.find("no algorithm for GEMM 6x8x12"), std::string::npos) << m;
  EXPECT_NE(m.find("nor padded to"), std::string::npos) << m;
  EXPECT_NE(m.find("lda=16"), std::string::npos) << m;
  // Nothing to pad: one question, and the error says so.
  int asked = 0;
  const GemmKey even{linear_forward_spec(64, 64, 64, DType::BF16, false), 256, 256, 256, 256};
  try {
    choose_lt_algorithms(even, [&](const GemmKey&) {
      ++asked;
      return std::vector<cublasLtMatmulAlgo_t>{};
    });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no algorithm for GEMM 64x64x64"), std::string::npos);
  }
  EXPECT_EQ(asked, 1);
}

// ---- The backend's scratch in its memory statistics ----

TEST(CudaScratch, DeviceScratchIsTheBackendsMemory) {
  const auto be = make_backend(DeviceRequest::kCpu, ComputeDType::kFp32);
  {
    DeviceScratch s(*be);
    EXPECT_EQ(be->memory_stats().in_use, 0u);  // nothing until asked
    void* p = s.get(1000);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(be->memory_stats().in_use, DeviceScratch::kGranule);
    EXPECT_EQ(s.get(DeviceScratch::kGranule), p);  // within the capacity: the same buffer
    s.get(DeviceScratch::kGranule + 1);            // grows: the old one is freed
    EXPECT_EQ(be->memory_stats().in_use, 2 * DeviceScratch::kGranule);
    EXPECT_EQ(be->memory_stats().peak, 2 * DeviceScratch::kGranule);
    LtGemm gemm(*be);  // its workspace and padded copies are scratch too, made on first use
    EXPECT_EQ(be->memory_stats().in_use, 2 * DeviceScratch::kGranule);
  }
  EXPECT_EQ(be->memory_stats().in_use, 0u);  // freed with their owners
}

TEST(CudaScratch, WithoutAStreamOrderedPoolOnePersistentBuffer) {
  const auto be = make_backend(DeviceRequest::kCpu, ComputeDType::kFp32);
  MemoryCounter counter;
  StreamScratchPool pool(*be, counter, /*stream_ordered=*/false);
  EXPECT_FALSE(pool.stream_ordered());
  void* first = nullptr;
  {
    StreamScratch s(4096, nullptr, pool);
    first = s.as<void>();
    ASSERT_NE(first, nullptr);
    // One at a time: a second would share the buffer.
    EXPECT_THROW(StreamScratch(16, nullptr, pool), Error);
    s.release();
  }
  EXPECT_EQ(be->memory_stats().in_use, DeviceScratch::kGranule);  // kept for the next op
  {
    StreamScratch again(100, nullptr, pool);  // reused, no new allocation
    EXPECT_EQ(again.as<void>(), first);
  }
  StreamScratch bigger(3 * DeviceScratch::kGranule, nullptr, pool);  // grows
  EXPECT_EQ(be->memory_stats().in_use, 3 * DeviceScratch::kGranule);
}

// ---- Peak FLOP/s (gpu_peak_flops.h) ----

TEST(GpuPeakFlops, PublishedFiguresByDeviceName) {
  const auto tf = [](std::string_view name) {
    const auto p = published_bf16_peak(name);
    return p ? p->tflops : 0.0;
  };
  // Names as the driver reports them.
  EXPECT_EQ(tf("NVIDIA H200"), 989);
  EXPECT_EQ(tf("NVIDIA H100 80GB HBM3"), 989);
  EXPECT_EQ(tf("NVIDIA H100 PCIe"), 756);
  EXPECT_EQ(tf("NVIDIA A100-SXM4-80GB"), 312);
  EXPECT_EQ(tf("NVIDIA A100 80GB PCIe"), 312);
  EXPECT_EQ(tf("NVIDIA L4"), 121);
  EXPECT_EQ(tf("NVIDIA L40S"), 362);
  EXPECT_EQ(tf("NVIDIA L40"), 181);
  EXPECT_EQ(tf("NVIDIA GeForce RTX 4090"), 165);
  // Whole words only, and variants without a figure never borrow a sibling's.
  EXPECT_EQ(tf("NVIDIA H100 NVL"), 0);
  EXPECT_EQ(tf("NVIDIA H200 NVL"), 0);
  EXPECT_EQ(tf("NVIDIA A10G"), 0);
  EXPECT_EQ(tf("NVIDIA L4000"), 0);
  EXPECT_EQ(tf("NVIDIA GeForce RTX 4090 D"), 165);
  EXPECT_EQ(tf("Some Future GPU"), 0);
  EXPECT_EQ(published_bf16_peak("NVIDIA H200")->gpu, "H200 SXM");
}

TEST(GpuPeakFlops, PublishedFirstElseTheClockWithANote) {
  // An H200 at its 1980 MHz boost clock would be 1070 TFLOP/s by the clock; the sheet says 989.
  PeakFlops p = gpu_peak_flops("NVIDIA H200", 9, 0, 132, 1980000, /*bf16=*/true);
  EXPECT_DOUBLE_EQ(p.flops, 989e12);
  EXPECT_NE(p.source.find("published"), std::string::npos) << p.source;
  // Unknown: the estimate, saying so.
  p = gpu_peak_flops("NVIDIA A10G", 8, 6, 80, 1710000, true);
  EXPECT_DOUBLE_EQ(p.flops, 1024.0 * 80 * 1710000 * 1e3);
  EXPECT_NE(p.source.find("estimate from the boost clock"), std::string::npos) << p.source;
  EXPECT_NE(p.source.find("no published figure for NVIDIA A10G"), std::string::npos) << p.source;
  // fp32 products (no TF32) are always the clock's.
  p = gpu_peak_flops("NVIDIA H200", 9, 0, 132, 1980000, /*bf16=*/false);
  EXPECT_DOUBLE_EQ(p.flops, 256.0 * 132 * 1980000 * 1e3);
  // An architecture without a rate: 0, and why.
  p = gpu_peak_flops("Tesla V100", 7, 0, 80, 1530000, true);
  EXPECT_EQ(p.flops, 0);
  EXPECT_NE(p.source.find("unknown"), std::string::npos) << p.source;
}

}  // namespace
}  // namespace kiln::cuda
