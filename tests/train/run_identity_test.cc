// Which recipe changes make a checkpoint another run's (run_identity.h).
#include "kiln/train/run_identity.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kiln {
namespace {

Recipe base(const std::vector<std::string>& overrides = {}) {
  return parse_recipe("model: {path: /m}\ndata: {train: /d.jsonl}\noutput: {dir: /o}\n", "t", {},
                      overrides);
}

TEST(RunIdentity, TheSameRecipeIsTheSameRun) { EXPECT_FALSE(run_identity_change(base(), base())); }

TEST(RunIdentity, ADataOrOptimizerChangeIsAnotherRunNamedByKey) {
  const auto c = run_identity_change(base(), base({"optimizer.lr=5e-4"}));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->key, "optimizer.lr");
  EXPECT_EQ(c->after, "0.0005");
  const auto d = run_identity_change(base(), base({"data.train=/other.jsonl"}));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->key, "data.train");
  EXPECT_EQ(d->before, "/d.jsonl");
  ASSERT_TRUE(run_identity_change(base(), base({"train.seed=7"})));
  ASSERT_TRUE(run_identity_change(base(), base({"data.seq_len=128"})));
}

// LoRA or not, and the adapters' shape and math, define the run; a full fine-tuning run has none.
TEST(RunIdentity, TheLoraSectionIsPartOfTheRun) {
  const auto c = run_identity_change(base(), base({"lora.rank=16"}));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->key, "lora.rank");
  EXPECT_EQ(c->before, "none");
  EXPECT_EQ(c->after, "16");
  const auto d = run_identity_change(base({"lora.rank=16"}), base({"lora.targets=q_proj"}));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->key, "lora.rank");
  const auto e = run_identity_change(base({"lora.rank=8"}), base({"lora.targets=q_proj"}));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->key, "lora.targets");
  EXPECT_EQ(e->after, "[q_proj]");
  EXPECT_FALSE(run_identity_change(base({"lora.rank=8"}), base({"lora.alpha=16"})));
}

TEST(RunIdentity, BudgetLoggingAndDistributionMayChangeOnResume) {
  for (const char* o : {"train.max_steps=999", "train.log_every=3", "dist.nproc_per_node=4",
                        "dist.strategy=no_shard", "checkpoint.every_steps=7", "output.dir=/x",
                        "train.activation_checkpointing=true", "eval.every_steps=5"}) {
    EXPECT_FALSE(run_identity_change(base(), base({o}))) << o;
  }
}

TEST(RunIdentity, EveryIdentityKeyIsARecipeKey) {
  for (const std::string& k : run_identity_keys()) {
    EXPECT_NE(std::find(recipe_keys().begin(), recipe_keys().end(), k), recipe_keys().end()) << k;
  }
}

}  // namespace
}  // namespace kiln
