// The tables Fsdp splits (Fsdp::acquire_table): the embedding's lookup (model/sharded_table.cc)
// and the LM head (model/vocab_parallel_loss.cc) against one process holding the whole model:
// ranks as threads, each with its own row of tokens, train one micro-batch through Fsdp; their
// loss sums and gradient shards must be the single process's over the concatenated rows, for a
// tied head (the embedding) and an untied one (the lm_head unit). The vocabulary (301 rows of
// 16) does not divide by the ranks; the shards hold whole rows (shard_geometry.h) and the
// batch's targets include the rows on either side of each shard boundary; some targets are
// ignored. A vocabulary of 9 over 4 ranks leaves the last rank no rows.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "common/rank_threads.h"
#include "common/small_model.h"
#include "common/test_backend.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/store.h"
#include "kiln/fsdp/fsdp.h"
#include "kiln/model/decoder.h"

namespace kiln {
namespace {

constexpr int kT = 12;  // tokens per rank: S * kT stays below the vocabulary

ModelConfig vocab_config(bool tied, int V = 301) {
  ModelConfig c = testing::small_config(tied);
  c.vocab_size = V;
  c.num_hidden_layers = 1;  // the (V, C) tables are the largest units by far
  return c;
}

// Row r of the group (T tokens): ids and targets spread over the vocabulary, every third target
// ignored, and targets on the last and first rows of the shards of 2 and 3 ranks (151 and 101
// rows each).
Batch rank_batch(int r, int V, int T) {
  Batch b;
  b.resize(1, T);
  const int edge_rows[] = {150, 151, 100, 101, 201, 202};
  for (int t = 0; t < T; ++t) {
    b.input_ids[t] = (t * 37 + r * 101) % V;
    b.positions[t] = t;
    b.targets[t] = t % 3 == 2 ? kIgnoreIndex : (t * 53 + r * 29 + 7) % V;
  }
  for (int k = 0; k < 2 && k < T; ++k) b.targets[k] = edge_rows[(2 * r + k) % 6] % V;
  return b;
}

Batch concat(int world, int V, int T) {
  Batch all;
  all.resize(world, T);
  for (int r = 0; r < world; ++r) {
    const Batch b = rank_batch(r, V, T);
    std::copy(b.input_ids.begin(), b.input_ids.end(), all.input_ids.begin() + r * T);
    std::copy(b.targets.begin(), b.targets.end(), all.targets.begin() + r * T);
    std::copy(b.positions.begin(), b.positions.end(), all.positions.begin() + r * T);
  }
  return all;
}

void check_split_head(int world, bool tied, bool bf16, double tol, int V = 301, int T = kT) {
  const ModelConfig c = vocab_config(tied, V);
  const Backend& be = bf16 ? testing::cpu_bf16() : testing::cpu_fp32();
  Decoder ref_model(c, be);
  ParamStore ref(ref_model.layout(), be);
  testing::randomize(ref, ref_model.layout(), 11);
  ref.zero_grads();
  const Batch all = concat(world, V, T);
  const float scale = 1.0f / static_cast<float>(all.num_targets());
  const double ref_loss = ref_model.forward_backward(all, ref, scale, false);

  auto store = std::make_shared<MemoryStore>();
  std::vector<double> losses(world);
  testing::run_rank_threads(world, [&](int r) {
    auto comm = make_gloo_communicator(store, r, world, GlooOptions{});
    Decoder model(c, be);
    Fsdp fsdp(model.layout(), be, ShardStrategy::kFullShard, *comm, nullptr);
    const auto ranges = fsdp.shard_ranges();
    for (int u = 0; u < fsdp.num_units(); ++u) {
      fsdp.zero_shard(u);
      fsdp.load_shard(u, 0, ref.params(u).data() + ranges[u].begin, ranges[u].size());
    }
    for (int u : {model.layout().embed_unit(), model.layout().lm_head_unit()}) {
      EXPECT_EQ(ranges[u].begin % c.hidden_size, 0u) << "unit " << u << " shard starts in a row";
      EXPECT_EQ(ranges[u].end % c.hidden_size, 0u) << "unit " << u << " shard ends in a row";
    }
    fsdp.zero_grads();
    losses[r] = model.forward_backward(rank_batch(r, V, T), fsdp, scale, false);
    fsdp.finish_backward();
    be.synchronize();
    const std::string what = "rank " + std::to_string(r) + " of " + std::to_string(world);
    for (int u = 0; u < fsdp.num_units(); ++u) {
      EXPECT_LT(testing::rel_err(fsdp.shard_grads(u), ref.grads(u).data() + ranges[u].begin,
                                 ranges[u].size()),
                tol)
          << what << " unit " << u;
    }
    // The split head never gathers its table (nor does the lookup, by rows): what was gathered
    // at once fits in the other units (with 301 rows, a table is more than all of them).
    size_t others = 0;
    for (int u = 0; u < fsdp.num_units(); ++u) {
      if (model.layout().units()[u].row_width == 0) others += fsdp.gathered_bytes(u);
    }
    EXPECT_LE(fsdp.peak_gathered_bytes(), others) << what;
  });
  double sum = 0;
  for (double l : losses) sum += l;
  EXPECT_NEAR(sum, ref_loss, tol * std::fabs(ref_loss));
}

TEST(VocabHead, SplitVocabularyMatchesOneProcess) {
  for (bool tied : {true, false}) {
    for (int world : {2, 3}) {
      SCOPED_TRACE(std::string(tied ? "tied" : "untied") + ", fp32, world " +
                   std::to_string(world));
      check_split_head(world, tied, false, 2e-5);
    }
  }
}

TEST(VocabHead, SplitVocabularyMatchesOneProcessInBf16) {
  for (bool tied : {true, false}) {
    for (int world : {2, 3}) {
      SCOPED_TRACE(std::string(tied ? "tied" : "untied") + ", bf16, world " +
                   std::to_string(world));
      check_split_head(world, tied, true, 2e-2);
    }
  }
}

// 9 rows over 4 ranks: 3, 3, 3 and none; 8 tokens in all, so the vocabulary is still split.
TEST(VocabHead, ARankWithoutRowsTakesPart) {
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    check_split_head(4, tied, false, 2e-5, 9, 2);
  }
}

}  // namespace
}  // namespace kiln
