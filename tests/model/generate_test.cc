// Incremental decoding: attention_decode against attention_forward's rows; the Generator's
// logits (prefill, then one token at a time, across chunks and after truncation) against a full
// forward of the training model over the whole sequence (with LoRA adapters too); sampling;
// streaming detokenisation.
#include "kiln/model/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/grad_check.h"
#include "common/small_model.h"
#include "common/test_backend.h"
#include "kiln/base/error.h"
#include "kiln/model/decoder.h"
#include "kiln/model/sampling.h"
#include "kiln/text/byte_level.h"
#include "kiln/text/token_stream.h"
#include "kiln/text/tokenizer.h"

namespace kiln {
namespace {

using testing::random_vec;

struct AttnCase {
  int H, KV, T, past;
};

class AttentionDecode : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionDecode, MatchesAttentionForwardRows) {
  const AttnCase c = GetParam();
  const int D = 8, Q = c.H * D, KV = c.KV * D, n_q = c.T - c.past;
  const auto q = random_vec(static_cast<size_t>(c.T) * Q, 1, 1.5f);
  const auto k = random_vec(static_cast<size_t>(c.T) * KV, 2, 1.5f);
  const auto v = random_vec(static_cast<size_t>(c.T) * KV, 3);
  std::vector<float> y_full(q.size()), lse(static_cast<size_t>(c.H) * c.T);
  testing::cpu_fp32().attention_forward(y_full.data(), lse.data(), q.data(), k.data(), v.data(),
                                        nullptr, AttnShape{1, c.T, c.H, c.KV, D});
  // The cache holds all T rows (the new tokens' after the past); y gets only the new rows.
  std::vector<float> y(static_cast<size_t>(n_q) * Q, -1.0f);
  testing::cpu_fp32().attention_decode(y.data(), q.data() + static_cast<size_t>(c.past) * Q,
                                       k.data(), v.data(), n_q, c.past, c.H, c.KV, D);
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_NEAR(y[i], y_full[static_cast<size_t>(c.past) * Q + i], 1e-5f) << "at " << i;
  }
}

// MHA, GQA and MQA; one new token, a few, a whole prompt, and more than one 64-row block.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionDecode,
                         ::testing::Values(AttnCase{4, 4, 1, 0}, AttnCase{4, 2, 37, 36},
                                           AttnCase{4, 2, 37, 30}, AttnCase{6, 1, 37, 0},
                                           AttnCase{6, 3, 150, 10}, AttnCase{2, 1, 200, 199},
                                           AttnCase{8, 2, 130, 0}));

// testing::small_config at generation's sizes: a wider model and vocabulary, longer positions.
ModelConfig small_config(bool tied) {
  ModelConfig c = testing::small_config(tied);
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.vocab_size = 97;
  c.max_position_embeddings = 512;
  return c;
}

// The small model as each family has it: Qwen3 with q/k norms and head_dim 16 (q_proj (64, 32),
// not hidden / heads = 8), Llama with llama3 RoPE scaling over an original context of 64
// (frequencies in all three bands; the sequences run past it), each tied and untied.
struct FamilyCase {
  const char* name;
  ModelFamily family;
  bool tied;
};

ModelConfig family_config(const FamilyCase& f) {
  const ModelConfig s = small_config(f.tied);
  ModelConfig c = testing::with_sizes_of(family_defaults(f.family), s);
  c.max_position_embeddings = s.max_position_embeddings;
  if (f.family == ModelFamily::kQwen3) c.head_dim_field = 16;
  if (f.family == ModelFamily::kLlama) {
    c.rope_theta = 500000.0;
    c.rope_scaling = {RopeScaling::Type::kLlama3, 8.0, 1.0, 4.0, 64};
  }
  return c;
}

// Every tensor random (matrices N(0, 0.2^2)), norms around 1, large enough that every path
// matters.
void randomize(ParamStore& store, const ParamLayout& layout, uint32_t seed) {
  testing::randomize(store, layout, seed, 0.2f);
}

// Logits (T, V) of the training model's forward over the whole sequence: its final hidden state
// times the head, in double. With `lora`, `store` holds ParamLayout(c, lora)'s units.
std::vector<float> full_logits(const ModelConfig& c, ParamStore& store,
                               const std::vector<int32_t>& ids,
                               const std::optional<LoraConfig>& lora = std::nullopt) {
  Decoder model(c, testing::cpu_fp32(), lora);
  Batch b;
  const int T = static_cast<int>(ids.size());
  b.resize(1, T);
  for (int t = 0; t < T; ++t) {
    b.input_ids[t] = ids[t];
    b.positions[t] = t;
  }
  model.forward(b, store);
  const ParamLayout& layout = model.layout();
  const float* wh = store.params(layout.lm_head_unit()).data();
  const int C = static_cast<int>(c.hidden_size), V = static_cast<int>(c.vocab_size);
  std::vector<float> logits(static_cast<size_t>(T) * V);
  for (int t = 0; t < T; ++t) {
    const float* x = model.final_hidden() + static_cast<size_t>(t) * C;
    for (int v = 0; v < V; ++v) {
      double s = 0;
      for (int i = 0; i < C; ++i)
        s += static_cast<double>(x[i]) * wh[static_cast<size_t>(v) * C + i];
      logits[static_cast<size_t>(t) * V + v] = static_cast<float>(s);
    }
  }
  return logits;
}

void expect_row(std::span<const float> got, const std::vector<float>& ref, int t, int V) {
  ASSERT_EQ(got.size(), static_cast<size_t>(V));
  float worst = 0;
  for (int v = 0; v < V; ++v) {
    worst = std::max(worst, std::fabs(got[v] - ref[static_cast<size_t>(t) * V + v]));
  }
  EXPECT_LT(worst, 1e-4f) << "position " << t;
}

class GeneratorLogits : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(GeneratorLogits, EqualFullForward) {
  const ModelConfig c = family_config(GetParam());
  const ParamLayout layout(c);
  ParamStore store(layout, testing::cpu_fp32(), /*with_grads=*/false);
  randomize(store, layout, 5);
  // Longer than one prefill chunk, so chunked prefill is covered too.
  const int T = Generator::kChunk + 44, V = static_cast<int>(c.vocab_size);
  std::vector<int32_t> ids(T);
  for (int t = 0; t < T; ++t) ids[t] = (t * 31 + 7) % V;
  const std::vector<float> ref = full_logits(c, store, ids);

  for (const int prompt : {1, 9, Generator::kChunk + 20}) {
    Generator gen(c, store, testing::cpu_fp32());
    expect_row(gen.prefill(std::span(ids).first(prompt)), ref, prompt - 1, V);
    for (int t = prompt; t < T; ++t) {
      expect_row(gen.step(ids[t]), ref, t, V);
      if (HasFailure()) return;
    }
    EXPECT_EQ(gen.length(), T);
  }
  // Truncating keeps the prefix: the rest re-run gives the same logits.
  Generator gen(c, store, testing::cpu_fp32());
  gen.prefill(std::span(ids).first(40));
  gen.truncate(12);
  expect_row(gen.prefill(std::span(ids).subspan(12, 20)), ref, 31, V);
  EXPECT_EQ(gen.length(), 32);
}

// With LoRA adapters (random, B non-zero) the Generator's logits equal the LoRA training
// forward's, and differ from the base's: the adapters are applied, not skipped.
TEST_P(GeneratorLogits, WithAdaptersEqualFullForward) {
  const ModelConfig c = family_config(GetParam());
  LoraConfig lora;
  lora.rank = 3;
  lora.alpha = 5.0;
  lora.dropout = 0.1;  // a training setting: decoding applies none
  lora.targets =
      resolve_lora_targets(GetParam().family == ModelFamily::kQwen3
                               ? std::vector<std::string>{"q_proj", "v_proj", "down_proj"}
                               : std::vector<std::string>{"all-linear"},
                           "test");
  const ParamLayout layout(c, lora), plain(c);
  ParamStore store(layout, testing::cpu_fp32(), /*with_grads=*/false);
  ParamStore base(plain, testing::cpu_fp32(), /*with_grads=*/false);
  randomize(store, layout, 6);
  for (int u = 0; u < plain.num_units(); ++u) {
    std::copy(store.params(u).data(), store.params(u).data() + store.params(u).size(),
              base.params(u).data());
  }
  const int T = Generator::kChunk + 20, V = static_cast<int>(c.vocab_size);
  std::vector<int32_t> ids(T);
  for (int t = 0; t < T; ++t) ids[t] = (t * 37 + 5) % V;
  // Evaluation drops nothing: the Decoder's forward() and the Generator alike.
  const std::vector<float> ref = full_logits(c, store, ids, lora);
  const std::vector<float> ref_base = full_logits(c, base, ids);
  float moved = 0;
  for (size_t i = 0; i < ref.size(); ++i) moved = std::max(moved, std::fabs(ref[i] - ref_base[i]));
  EXPECT_GT(moved, 1e-2f) << "the adapters do not change the logits";

  const int prompt = Generator::kChunk + 5;  // chunked prefill, then single steps
  Generator gen(c, store, testing::cpu_fp32(), lora);
  expect_row(gen.prefill(std::span(ids).first(prompt)), ref, prompt - 1, V);
  for (int t = prompt; t < T; ++t) {
    expect_row(gen.step(ids[t]), ref, t, V);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GeneratorLogits,
                         ::testing::Values(FamilyCase{"qwen2_tied", ModelFamily::kQwen2, true},
                                           FamilyCase{"qwen2_untied", ModelFamily::kQwen2, false},
                                           FamilyCase{"qwen3_tied", ModelFamily::kQwen3, true},
                                           FamilyCase{"qwen3_untied", ModelFamily::kQwen3, false},
                                           FamilyCase{"llama_tied", ModelFamily::kLlama, true},
                                           FamilyCase{"llama_untied", ModelFamily::kLlama, false}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Generator, GreedyContinuationMatchesFullRecompute) {
  const ModelConfig c = small_config(/*tied=*/true);
  const ParamLayout layout(c);
  ParamStore store(layout, testing::cpu_fp32(), /*with_grads=*/false);
  randomize(store, layout, 9);
  const int V = static_cast<int>(c.vocab_size);
  std::vector<int32_t> seq = {3, 14, 15, 92, 65};
  Generator gen(c, store, testing::cpu_fp32());
  Sampler greedy({0.0, 1.0}, 0);
  std::span<const float> logits = gen.prefill(seq);
  for (int n = 0; n < 12; ++n) {
    const int32_t next = greedy.sample(logits);
    const std::vector<float> ref = full_logits(c, store, seq);
    const float* last = ref.data() + (seq.size() - 1) * V;
    EXPECT_EQ(next, std::max_element(last, last + V) - last) << "token " << n;
    seq.push_back(next);
    logits = gen.step(next);
  }
}

TEST(Generator, RejectsBadInput) {
  ModelConfig c = small_config(true);
  c.max_position_embeddings = 8;
  const ParamLayout layout(c);
  ParamStore store(layout, testing::cpu_fp32(), /*with_grads=*/false);
  Generator gen(c, store, testing::cpu_fp32());
  EXPECT_THROW(gen.prefill(std::vector<int32_t>{1, 97}), Error);
  EXPECT_THROW(gen.prefill(std::vector<int32_t>(9, 1)), Error);
  gen.prefill(std::vector<int32_t>(8, 1));
  EXPECT_THROW(gen.step(1), Error);
  EXPECT_EQ(gen.length(), 8);
}

TEST(Sampler, GreedyIsFirstArgmax) {
  Sampler s({0.0, 1.0}, 1);
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.sample(logits), 1);
  EXPECT_THROW(s.sample(std::vector<float>{0.0f, NAN}), Error);
  EXPECT_THROW(Sampler({-1.0, 1.0}, 0), Error);
  EXPECT_THROW(Sampler({1.0, 0.0}, 0), Error);
  EXPECT_THROW(Sampler({1.0, 1.5}, 0), Error);
}

TEST(Sampler, FollowsTheDistributionAndTheNucleus) {
  // probabilities 0.5, 0.25, 0.125, 0.125 at temperature 1
  const std::vector<float> logits = {std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  const int n = 40000;
  std::map<int, int> all, nucleus, cold;
  Sampler s_all({1.0, 1.0}, 7), s_nucleus({1.0, 0.7}, 7), s_cold({0.25, 1.0}, 7);
  for (int i = 0; i < n; ++i) {
    ++all[s_all.sample(logits)];
    ++nucleus[s_nucleus.sample(logits)];
    ++cold[s_cold.sample(logits)];
  }
  EXPECT_NEAR(all[0] / double(n), 0.5, 0.01);
  EXPECT_NEAR(all[1] / double(n), 0.25, 0.01);
  EXPECT_NEAR(all[3] / double(n), 0.125, 0.01);
  // top-p 0.7: {0, 1} (mass 0.75) renormalised to 2/3, 1/3
  EXPECT_EQ(nucleus.count(2) + nucleus.count(3), 0u);
  EXPECT_NEAR(nucleus[0] / double(n), 2.0 / 3, 0.01);
  // T = 0.25: p ~ p^4, so 256 : 16 : 1 : 1
  EXPECT_NEAR(cold[0] / double(n), 256.0 / 274, 0.01);

  // The same seed gives the same draws; a large vocabulary takes the widening top-k path.
  const auto big = random_vec(151669, 3, 3.0f);
  Sampler a({0.8, 0.9}, 42), b({0.8, 0.9}, 42), other({0.8, 0.9}, 43);
  int differ = 0;
  for (int i = 0; i < 50; ++i) {
    const int32_t x = a.sample(big);
    EXPECT_EQ(x, b.sample(big));
    differ += x != other.sample(big);
  }
  EXPECT_GT(differ, 0);
}

TEST(TokenStream, PiecesJoinToDecodeAndHoldBackUnfinishedCharacters) {
  const Tokenizer tok =
      Tokenizer::load(fs::path(KILN_SOURCE_DIR) / "assets/tokenizer/qwen3/tokenizer.json");
  const std::string text =
      "héllo 世界! 🎉👍🏽 naïve <|im_end|> 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ok";
  const std::vector<int32_t> ids = tok.encode(text);
  TokenStream stream(tok);
  std::string joined;
  int held = 0;
  for (const int32_t id : ids) {
    const std::string piece = stream.push(id);
    held += piece.empty();
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << "U+FFFD in a piece";
    joined += piece;
  }
  joined += stream.finish();
  EXPECT_EQ(joined, text);
  EXPECT_EQ(joined, tok.decode(ids));
  EXPECT_GT(held, 0) << "expected some token to end inside a character";

  // Single-byte tokens: E4 and B8 wait for 96; together they are 世 (E4 B8 96).
  const auto byte_token = [&tok](char b) {
    std::string spelling;
    text::append_byte_level(spelling, std::string(1, b));
    return tok.token_id(spelling);
  };
  const std::vector<int32_t> bytes = {byte_token('\xE4'), byte_token('\xB8'), byte_token('\x96')};
  for (const int32_t id : bytes) ASSERT_GE(id, 0);
  EXPECT_EQ(stream.push(bytes[0]), "");
  EXPECT_EQ(stream.push(bytes[1]), "");
  EXPECT_EQ(stream.push(bytes[2]), "世");
  // A started character that never finishes: replaced like decode() does.
  const int32_t a = tok.token_id("a");
  EXPECT_EQ(stream.push(bytes[0]), "");
  EXPECT_EQ(stream.push(a),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(stream.push(bytes[0]), "");
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
  EXPECT_THROW(stream.push(static_cast<int32_t>(tok.vocab_size())), Error);
}

}  // namespace
}  // namespace kiln
