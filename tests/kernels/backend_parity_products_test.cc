// Backend parity of the ops built on matrix products: matmul forward and backward, attention
// (with document boundaries and grouped-query heads) and its decode step, and the fused LM head
// with cross-entropy. On a bf16 backend the inputs that feed products are also given in bf16, as
// FSDP gathers them; the reference gets the same values in fp32.
#include "backend_parity_shapes.h"
#include "common/test_backend.h"

namespace kiln::parity {
namespace {

// The dtypes a backend's product inputs come in: F32 always, BF16 too on a bf16 backend.
std::vector<DType> product_input_dtypes(const Backend& be) {
  if (be.compute_dtype() == ComputeDType::kBf16) return {DType::F32, DType::BF16};
  return {DType::F32};
}
// `dtype` on the backend under test, F32 on the reference.
DType on(const Backend& b, DType dtype) { return &b == &reference() ? DType::F32 : dtype; }

struct Product {
  std::string name;
  int IC, OC;
  bool bias;
};
// A layer's products: q/k/v (with bias), gate (or up) and down projections, and LoRA's on the
// q/k/v group at rank 16 (lora_ops.h: the three A's, (48, C), then the block-diagonal B's,
// (Q + 2 KV, 48): rows of a few dozen floats). The 1.5B gate (1536 -> 8960) is left out to keep
// the suite fast: its dims are those of the down projection transposed.
std::vector<Product> layer_products(const LayerShape& s) {
  const int qkv = s.hidden + 2 * s.kv_heads * s.head_dim;
  std::vector<Product> p = {{"qkv", s.hidden, qkv, true},
                            {"down", s.intermediate, s.hidden, false},
                            {"lora A qkv", s.hidden, 3 * 16, false},
                            {"lora B qkv", 3 * 16, qkv, false}};
  if (s.intermediate < 8960) p.push_back({"gate", s.hidden, s.intermediate, false});
  return p;
}

// N = 1 (a decoding step: the CPU and cuBLASLt may take a matrix-vector path) on the small
// products only, to keep the suite fast.
TEST_P(BackendParity, MatmulForward) {
  for (const LayerShape& s : layer_shapes()) {
    for (const Product& p : layer_products(s)) {
      std::vector<int> rows = {kTokens};
      if (s.name == "tiny" || p.name == "qkv") rows.push_back(1);
      const auto w = random_values(static_cast<size_t>(p.OC) * p.IC, 31, 0.05f);
      const auto bias = random_values(p.OC, 32);
      for (const int N : rows) {
        const auto x = random_values(static_cast<size_t>(N) * p.IC, 30);
        for (DType in : product_input_dtypes(be())) {
          const std::string what =
              s.name + " " + p.name + " N=" + std::to_string(N) + " " + std::string(dtype_name(in));
          expect_parity(be(), "matmul_forward " + what, kProduct, [&](const Backend& b) {
            DeviceScope d(b);
            const size_t n = static_cast<size_t>(N) * p.OC;
            const ConstDevPtr xd = d.upload_as(x, on(b, in));
            const ConstDevPtr wd = d.upload_as(w, on(b, in));
            float* out = d.zeros<float>(n);
            b.matmul_forward(out, xd, wd, static_cast<const float*>(nullptr), N, p.IC, p.OC);
            Outputs outs{{"out", d.download(out, n)}};
            if (p.bias) {
              float* with_bias = d.zeros<float>(n);
              b.matmul_forward(with_bias, xd, wd, d.upload_as(bias, on(b, in)), N, p.IC, p.OC);
              outs.push_back({"out with bias", d.download(with_bias, n)});
            }
            return outs;
          });
        }
      }
    }
  }
}

// The backward's variants in sequence on the same buffers, so each shows in the result:
// (1) dx written, db added; (2) dx accumulated, db null; (3) dx null, db added. Afterwards
// dx = 2 dout w, dw = dw0 + 3 dout^T x, db = db0 + 2 colsum(dout).
// An fp32 bias sliced from a flat unit need not be 16-byte aligned (cuBLASLt's bias epilogue
// has no alignment preference, so the CUDA backend stages it, else "misaligned address").
TEST_P(BackendParity, MatmulBiasAtAnOddFloatOffset) {
  const int N = 33, IC = 64, OC = 48;
  const auto x = random_values(static_cast<size_t>(N) * IC, 21);
  const auto w = random_values(static_cast<size_t>(OC) * IC, 22, 0.1f);
  const auto padded_bias = random_values(OC + 1, 23);
  expect_parity(be(), "matmul_forward, bias one float off", kProduct, [&](const Backend& b) {
    DeviceScope d(b);
    float* out = d.zeros<float>(static_cast<size_t>(N) * OC);
    const float* bias = d.upload(padded_bias) + 1;  // 4 bytes past an aligned allocation
    b.matmul_forward(out, d.upload(x), d.upload(w), bias, N, IC, OC);
    return Outputs{{"out", d.download(out, static_cast<size_t>(N) * OC)}};
  });
}

TEST_P(BackendParity, MatmulBackward) {
  const int N = kTokens;
  for (const LayerShape& s : layer_shapes()) {
    for (const Product& p : layer_products(s)) {
      const size_t nx = static_cast<size_t>(N) * p.IC, nw = static_cast<size_t>(p.OC) * p.IC;
      const auto x = random_values(nx, 33), w = random_values(nw, 34, 0.05f);
      const auto dout = random_values(static_cast<size_t>(N) * p.OC, 35);
      const auto dx0 = random_values(nx, 36), dw0 = random_values(nw, 37, 0.1f);
      const auto db0 = random_values(p.OC, 38);
      for (DType in : product_input_dtypes(be())) {
        const std::string what = s.name + " " + p.name + " " + std::string(dtype_name(in));
        expect_parity(be(), "matmul_backward " + what, kProduct, [&](const Backend& b) {
          DeviceScope d(b);
          float* dx = d.upload(dx0);
          float* dw = d.upload(dw0);
          float* db = d.upload(db0);
          const float* g = d.upload(dout);
          const ConstDevPtr xd = d.upload_as(x, on(b, in));
          const ConstDevPtr wd = d.upload_as(w, on(b, in));
          b.matmul_backward(dx, dw, db, g, xd, wd, N, p.IC, p.OC, /*accumulate=*/false);
          b.matmul_backward(dx, dw, nullptr, g, xd, wd, N, p.IC, p.OC, /*accumulate=*/true);
          b.matmul_backward(nullptr, dw, db, g, xd, wd, N, p.IC, p.OC, /*accumulate=*/false);
          return Outputs{
              {"dx", d.download(dx, nx)}, {"dw", d.download(dw, nw)}, {"db", d.download(db, p.OC)}};
        });
      }
    }
  }
}

// doc_start (B, T): row 0 holds documents starting at 0, 4 and 9, row 1 one document, row b > 1
// documents starting every 3 tokens.
std::vector<int32_t> doc_starts(int B, int T) {
  std::vector<int32_t> ds(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; ++b) {
    int start = 0;
    for (int t = 0; t < T; ++t) {
      if ((b == 0 && (t == 4 || t == 9)) || (b > 1 && t % 3 == 0)) start = t;
      ds[static_cast<size_t>(b) * T + t] = start;
    }
  }
  return ds;
}

std::vector<AttnShape> attention_shapes(Sizes sizes) {
  // Tiny ones, and rows longer than one 64-row tile of the flash kernels (head_dim 64 and 128).
  std::vector<AttnShape> shapes = {
      {1, 5, 2, 1, 4}, {3, 7, 4, 2, 8}, {2, 130, 4, 2, 64}, {1, 100, 2, 2, 128}};
  for (const LayerShape& s : layer_shapes(sizes)) {
    if (s.name != "tiny") shapes.push_back({2, 12, s.heads, s.kv_heads, s.head_dim});
  }
  return shapes;
}

std::string shape_name(const AttnShape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " KV=" + std::to_string(s.KV) + " D=" + std::to_string(s.D);
}

// Forward and backward, each backend from its own forward's y and lse.
TEST_P(BackendParity, Attention) {
  for (const AttnShape& s : attention_shapes(sizes())) {
    const size_t nq = static_cast<size_t>(s.B) * s.T * s.H * s.D;
    const size_t nk = static_cast<size_t>(s.B) * s.T * s.KV * s.D;
    const size_t nl = static_cast<size_t>(s.B) * s.H * s.T;
    const auto q = random_values(nq, 40), k = random_values(nk, 41), v = random_values(nk, 42);
    const auto dy = random_values(nq, 43);
    const auto docs = doc_starts(s.B, s.T);
    for (const bool with_docs : {false, true}) {
      const std::string what = shape_name(s) + (with_docs ? " doc_start" : "");
      expect_parity(be(), "attention " + what, kProduct, [&](const Backend& b) {
        DeviceScope d(b);
        const float* qd = d.upload(q);
        const float* kd = d.upload(k);
        const float* vd = d.upload(v);
        const int32_t* ds = with_docs ? d.upload(docs) : nullptr;
        float* y = d.zeros<float>(nq);
        float* lse = d.zeros<float>(nl);
        b.attention_forward(y, lse, qd, kd, vd, ds, s);
        float* dq = d.zeros<float>(nq);
        float* dk = d.zeros<float>(nk);
        float* dv = d.zeros<float>(nk);
        b.attention_backward(dq, dk, dv, d.upload(dy), qd, kd, vd, y, lse, ds, s);
        return Outputs{{"y", d.download(y, nq)},
                       {"lse", d.download(lse, nl)},
                       {"dq", d.download(dq, nq)},
                       {"dk", d.download(dk, nk)},
                       {"dv", d.download(dv, nk)}};
      });
    }
  }
}

TEST_P(BackendParity, AttentionDecode) {
  struct Step {
    int n_q, past;
  };
  for (const AttnShape& s : attention_shapes(sizes())) {
    for (const Step st : {Step{1, 0}, Step{1, 9}, Step{3, 10}}) {
      const int rows = st.past + st.n_q;
      const size_t nq = static_cast<size_t>(st.n_q) * s.H * s.D;
      const size_t nk = static_cast<size_t>(rows) * s.KV * s.D;
      const auto q = random_values(nq, 44), k = random_values(nk, 45), v = random_values(nk, 46);
      const std::string what =
          shape_name(s) + " n_q=" + std::to_string(st.n_q) + " past=" + std::to_string(st.past);
      expect_parity(be(), "attention_decode " + what, kProduct, [&](const Backend& b) {
        DeviceScope d(b);
        float* y = d.zeros<float>(nq);
        b.attention_decode(y, d.upload(q), d.upload(k), d.upload(v), st.n_q, st.past, s.H, s.KV,
                           s.D);
        return Outputs{{"y", d.download(y, nq)}};
      });
    }
  }
}

struct CrossEntropyCase {
  int N, C, V;
};
// Vocabulary sizes at the edges of powers of two (where kernels split a row of logits among
// threads), and Qwen's hidden sizes (not at tiny sizes); C = 4 and 12 make rows of the logits'
// inputs shorter than 16 bytes in bf16 (cuBLASLt's padded retry, gemm_lt_choice.h).
std::vector<CrossEntropyCase> cross_entropy_cases(Sizes sizes) {
  std::vector<CrossEntropyCase> cases;
  for (const int V :
       {1, 2, 31, 32, 33, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025, 4095, 4096, 4097}) {
    cases.push_back({kTokens + 1, 16, V});
  }
  cases.push_back({kTokens, 4, 301});
  cases.push_back({kTokens, 12, 97});
  if (sizes == Sizes::kTiny) return cases;
  cases.push_back({kTokens, 896, 2049});
  cases.push_back({kTokens, 1536, 1025});
  return cases;
}

// Targets in [0, V) with every third one ignored (kIgnoreIndex).
std::vector<int32_t> targets_for(int N, int V) {
  std::vector<int32_t> t(N);
  for (int n = 0; n < N; ++n) t[n] = n % 3 == 1 ? kIgnoreIndex : (n * 7919 + 3) % V;
  return t;
}

TEST_P(BackendParity, CrossEntropy) {
  // The loss only, with dx and dw, and with dx only (a frozen head: LoRA).
  enum class Grad { kNone, kBoth, kDxOnly };
  for (const CrossEntropyCase& c : cross_entropy_cases(sizes())) {
    const size_t nx = static_cast<size_t>(c.N) * c.C, nw = static_cast<size_t>(c.V) * c.C;
    const auto x = random_values(nx, 50), w = random_values(nw, 51, 0.5f);
    const auto dw0 = random_values(nw, 52, 0.01f);
    const auto targets = targets_for(c.N, c.V);
    for (DType in : product_input_dtypes(be())) {
      for (const Grad grad : {Grad::kNone, Grad::kBoth, Grad::kDxOnly}) {
        const std::string what = "N=" + std::to_string(c.N) + " C=" + std::to_string(c.C) +
                                 " V=" + std::to_string(c.V) + " " + std::string(dtype_name(in)) +
                                 (grad == Grad::kNone   ? " loss only"
                                  : grad == Grad::kBoth ? " grad"
                                                        : " dx only");
        expect_parity(be(), "cross_entropy " + what, kProduct, [&](const Backend& b) {
          DeviceScope d(b);
          double* loss = d.upload(std::vector<double>{1.5});
          float* dx = grad != Grad::kNone ? d.zeros<float>(nx) : nullptr;
          float* dw = grad == Grad::kBoth ? d.upload(dw0) : nullptr;
          // x feeds the product too, but the op takes it in fp32 (its rows are rounded inside).
          b.cross_entropy(loss, dx, dw, d.upload(x), d.upload_as(w, on(b, in)), d.upload(targets),
                          c.N, rows_with_target(targets.data(), c.N), c.C, c.V, 0.125f);
          Outputs out{{"loss", d.download(loss, 1)}};
          if (dx != nullptr) out.push_back({"dx", d.download(dx, nx)});
          if (dw != nullptr) out.push_back({"dw", d.download(dw, nw)});
          return out;
        });
      }
    }
  }
}

// Qwen's vocabulary over enough rows that both the CPU (256 rows) and CUDA (a 256 MiB logits
// budget: 441 rows at this vocabulary) split them into chunks; a narrow hidden size keeps it
// fast. Loss and gradients, fp32 inputs.
TEST_P(BackendParity, CrossEntropyChunkedRows) {
  if (tiny()) GTEST_SKIP() << "Qwen's 151,936-token vocabulary is no tiny case";
  const int N = 450, C = 4, V = 151936;
  const size_t nx = static_cast<size_t>(N) * C, nw = static_cast<size_t>(V) * C;
  const auto x = random_values(nx, 57, 2.0f), w = random_values(nw, 58);
  const auto targets = targets_for(N, V);
  expect_parity(be(), "cross_entropy chunked rows", kProduct, [&](const Backend& b) {
    DeviceScope d(b);
    double* loss = d.zeros<double>(1);
    float* dx = d.zeros<float>(nx);
    float* dw = d.zeros<float>(nw);
    b.cross_entropy(loss, dx, dw, d.upload(x), d.upload(w), d.upload(targets), N,
                    rows_with_target(targets.data(), N), C, V, 1.0f / 300);
    return Outputs{
        {"loss", d.download(loss, 1)}, {"dx", d.download(dx, nx)}, {"dw", d.download(dw, nw)}};
  });
}

// Every target ignored: no loss, zero dx, dw unchanged.
TEST_P(BackendParity, CrossEntropyAllIgnored) {
  const int N = 4, C = 16, V = 33;
  const auto x = random_values(static_cast<size_t>(N) * C, 53);
  const auto w = random_values(static_cast<size_t>(V) * C, 54);
  const auto dw0 = random_values(static_cast<size_t>(V) * C, 55);
  const std::vector<int32_t> targets(N, kIgnoreIndex);
  expect_parity(be(), "cross_entropy all ignored", kExact, [&](const Backend& b) {
    DeviceScope d(b);
    double* loss = d.upload(std::vector<double>{2.0});
    float* dx = d.upload(random_values(static_cast<size_t>(N) * C, 56));
    float* dw = d.upload(dw0);
    b.cross_entropy(loss, dx, dw, d.upload(x), d.upload(w), d.upload(targets), N, 0, C, V, 1.0f);
    return Outputs{{"loss", d.download(loss, 1)},
                   {"dx", d.download(dx, static_cast<size_t>(N) * C)},
                   {"dw", d.download(dw, dw0.size())}};
  });
}

// The split-vocabulary passes (ce_part_max, ce_part_sumexp, ce_part_row_loss, ce_part_grad)
// over two blocks of logits with a leading dimension wider than either, as the
// vocabulary-parallel and preference heads (model/vocab_parallel_loss.cc, preference_head.cc)
// call them; row_weight (n) may be null, row_loss (n) is written.
void split_vocabulary_loss(const Backend& b, float* logits, double* loss, float* row_max,
                           float* sums, float* row_loss, const float* row_weight,
                           const int32_t* targets, int n, int V, int split, int loss_begin,
                           int loss_end, float scale) {
  const int ld = V + 3;
  b.ce_part_max(row_max, logits, n, split, ld, false);
  b.ce_part_max(row_max, logits + split, n, V - split, ld, true);
  b.ce_part_sumexp(sums, logits, row_max, targets, 0, n, split, ld);
  b.ce_part_sumexp(sums, logits + split, row_max, targets, split, n, V - split, ld);
  b.ce_part_row_loss(row_loss, row_max, sums, targets, n);
  b.ce_part_grad(logits, loss, row_max, sums, targets, 0, n, split, ld, scale, row_weight,
                 loss_begin, loss_end);
  b.ce_part_grad(logits + split, nullptr, row_max, sums, targets, split, n, V - split, ld, scale,
                 row_weight, 0, 0);
}

TEST_P(BackendParity, CrossEntropySplitVocabulary) {
  const int n = 37, V = 301, split = 120, ld = V + 3;
  const auto logits = random_values(static_cast<size_t>(n) * ld, 61, 3.0f);
  const auto targets = targets_for(n, V);
  const auto weights = random_values(static_cast<size_t>(n), 63, 2.0f);
  expect_parity(be(), "ce_part_max, ce_part_sumexp, ce_part_row_loss, ce_part_grad", kProduct,
                [&](const Backend& b) {
                  DeviceScope d(b);
                  float* lg = d.upload(logits);
                  double* loss = d.zeros<double>(1);
                  float* row_max = d.zeros<float>(n);
                  float* sums = d.zeros<float>(2 * static_cast<size_t>(n));
                  float* row_loss = d.zeros<float>(n);
                  split_vocabulary_loss(b, lg, loss, row_max, sums, row_loss, d.upload(weights),
                                        d.upload(targets), n, V, split, 5, 30, 0.25f);
                  return Outputs{{"loss", d.download(loss, 1)},
                                 {"row_max", d.download(row_max, n)},
                                 {"sums", d.download(sums, 2 * static_cast<size_t>(n))},
                                 {"row_loss", d.download(row_loss, n)},
                                 {"grad", d.download(lg, logits.size())}};
                });
}

// The preference ops (kernels/preference_terms.h): sequences' log-probabilities from row losses,
// then each loss type's row weights and pair sums, a pair with an empty completion among them;
// the sequences are ranges of rows of unequal lengths, with rows between them that belong to none
// (their weight stays zero), as the documents of packed rows are.
TEST_P(BackendParity, PreferenceLoss) {
  const int S = 6, T = 37;
  const std::vector<int32_t> bounds = {0, 30, 37, 74, 80, 100, 111, 140, 150, 185, 190, 222};
  auto row_loss = random_values(static_cast<size_t>(S) * T, 64, 2.0f, 2.5f);
  std::vector<int32_t> targets(row_loss.size(), 5);
  for (int s = 0; s < S; ++s) {
    for (int t = 0; t < 3 + s; ++t) targets[static_cast<size_t>(s) * T + t] = kIgnoreIndex;
  }
  for (int t = 0; t < T; ++t) targets[static_cast<size_t>(3) * T + t] = kIgnoreIndex;
  const std::vector<double> ref = {-60, 30, -70, 31, -50, 29, -40, 0, -65, 28, -62, 27};
  for (const PreferenceLossType type : {PreferenceLossType::kSigmoid, PreferenceLossType::kIpo,
                                        PreferenceLossType::kHinge, PreferenceLossType::kSimpo}) {
    const PreferenceTerms terms{type, 0.2, 0.1, 0.4, 0.25};
    expect_parity(be(), "sequence_logps, preference_loss", kExact, [&](const Backend& b) {
      DeviceScope d(b);
      double* seq = d.zeros<double>(2 * S);
      float* weight = d.zeros<float>(row_loss.size());
      double* sums = d.zeros<double>(kNumPreferenceSums);
      const int32_t* db = d.upload(bounds);
      b.sequence_logps(seq, d.upload(row_loss), d.upload(targets), db, S);
      b.preference_loss(weight, sums, seq, d.upload(ref), db, S, terms, 0, S / 2);
      return Outputs{{"seq", d.download(seq, 2 * S)},
                     {"row_weight", d.download(weight, row_loss.size())},
                     {"sums", d.download(sums, kNumPreferenceSums)}};
    });
  }
}

// The passes are the cross-entropy: against cross_entropy with x the identity (N = C), whose
// logits are w^T and whose dw is the transposed logit gradient, on the CPU reference.
TEST(CrossEntropySplitVocabulary, IsTheFusedCrossEntropy) {
  const int n = 24, V = 53, split = 20, ld = V + 3;
  const Backend& b = testing::cpu_fp32();
  const auto w = random_values(static_cast<size_t>(V) * n, 62, 2.0f);
  std::vector<float> x(static_cast<size_t>(n) * n, 0.0f), logits(static_cast<size_t>(n) * ld);
  for (int i = 0; i < n; ++i) {
    x[static_cast<size_t>(i) * n + i] = 1.0f;
    for (int v = 0; v < V; ++v) logits[static_cast<size_t>(i) * ld + v] = w[v * n + i];
  }
  const auto targets = targets_for(n, V);
  const float scale = 0.5f;
  double fused = 0, split_loss = 0;
  std::vector<float> dx(x.size()), dw(w.size(), 0.0f), row_max(n), sums(2 * n, 0.0f), row_loss(n);
  b.cross_entropy(&fused, dx.data(), dw.data(), x.data(), w.data(), targets.data(), n,
                  rows_with_target(targets.data(), n), n, V, scale);
  split_vocabulary_loss(b, logits.data(), &split_loss, row_max.data(), sums.data(), row_loss.data(),
                        nullptr, targets.data(), n, V, split, 0, n, scale);
  EXPECT_NEAR(split_loss, fused, 1e-5 * std::fabs(fused));
  double row_losses = 0;
  for (int i = 0; i < n; ++i) {
    row_losses += row_loss[i];
    if (targets[i] == kIgnoreIndex) {
      EXPECT_EQ(row_loss[i], 0.0f) << i;
    }
  }
  EXPECT_NEAR(row_losses, fused, 1e-5 * std::fabs(fused));
  for (int i = 0; i < n; ++i) {
    for (int v = 0; v < V; ++v) {
      EXPECT_NEAR(logits[static_cast<size_t>(i) * ld + v], dw[v * n + i], 1e-6) << i << " " << v;
    }
  }
}

// The same call twice gives the same loss and gradients bit for bit (no float atomics).
TEST_P(BackendParity, CrossEntropyRepeatsBitForBit) {
  const int N = 40, C = 16, V = 300;
  const auto x = random_values(static_cast<size_t>(N) * C, 31);
  const auto w = random_values(static_cast<size_t>(V) * C, 32);
  const auto targets = targets_for(N, V);
  const int targeted = rows_with_target(targets.data(), N);
  std::vector<std::vector<double>> runs;
  for (int rep = 0; rep < 2; ++rep) {
    DeviceScope d(be());
    double* loss = d.zeros<double>(1);
    float* dx = d.zeros<float>(static_cast<size_t>(N) * C);
    float* dw = d.zeros<float>(static_cast<size_t>(V) * C);
    be().cross_entropy(loss, dx, dw, d.upload(x), d.upload(w), d.upload(targets), N, targeted, C, V,
                       0.1f);
    std::vector<double> all = d.download(loss, 1);
    for (const auto& part :
         {d.download(dx, static_cast<size_t>(N) * C), d.download(dw, static_cast<size_t>(V) * C)}) {
      all.insert(all.end(), part.begin(), part.end());
    }
    runs.push_back(std::move(all));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

}  // namespace
}  // namespace kiln::parity
