// Preference tuning (a dpo section) end to end through the kiln binary, on pairs made from the
// demo tokens (common/preference_data.h) and a tiny model:
//   - the first step's loss is ln 2 (reference: base is the policy's starting weights), TRL's
//     metrics are in metrics.jsonl, and the loss falls;
//   - every FSDP strategy at 2 workers (hybrid_shard: two nodes of one) equals one process, for
//     full fine-tuning against a frozen reference model and for LoRA against its base;
//   - a worker SIGKILLed mid-run restarts from the newest checkpoint and finishes with the losses
//     and weights of an uninterrupted run, bit for bit;
//   - bad input is one line and a non-zero exit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "common/preference_data.h"
#include "common/run_kiln.h"
#include "common/run_losses.h"
#include "common/temp_dir.h"
#include "common/tiny_run.h"
#include "common/weight_diff.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"

namespace kiln {
namespace {

using testing::run_kiln;
using testing::run_losses;

constexpr int kSteps = 10;

// <tmp>/kiln_dpo_<name>/{init, pairs.jsonl, recipe.yaml}: 4 pairs (8 rows) a step.
fs::path make_dpo_run(const std::string& name, const std::string& extra = "", int pairs = 200) {
  const fs::path d = testing::fresh_dir("kiln_dpo", name);
  testing::init_tiny_model(d, 3);
  testing::write_demo_pairs(d / "pairs.jsonl", pairs);
  write_file_atomic(d / "recipe.yaml", "model:\n  path: " + (d / "init").string() +
                                           "\ndata:\n  train: " + (d / "pairs.jsonl").string() +
                                           "\n  format: preference\n  seq_len: 48\n"
                                           "dpo:\n  beta: 0.1\n"
                                           "optimizer:\n  lr: 3.0e-3\n"
                                           "train:\n  max_steps: " +
                                           std::to_string(kSteps) +
                                           "\n  micro_batch_size: 8\n  log_every: 5\n"
                                           "checkpoint:\n  every_steps: 3\n  keep_last: 0\n"
                                           "dist:\n  timeout_s: 60\n  threads_per_worker: 1\n" +
                                           extra);
  return d;
}

fs::path train(const fs::path& d, const std::string& out, const std::string& args,
               const std::string& env = "") {
  const auto r = run_kiln(
      "train " + (d / "recipe.yaml").string() + " output.dir=" + (d / out).string() + " " + args,
      env);
  EXPECT_EQ(r.code, 0) << r.out;
  return d / out;
}

// The same on two "nodes" of this machine, one worker each: one agent per node, node 0 hosting
// the store.
fs::path train_two_nodes(const fs::path& d, const std::string& out, const std::string& args) {
  const int port = 29500 + static_cast<int>(::getpid() % 2000) + 17;
  std::vector<testing::CmdResult> results(2);
  std::vector<std::thread> agents;
  for (int n = 0; n < 2; ++n) {
    agents.emplace_back([&, n] {
      results[n] = run_kiln(
          "train " + (d / "recipe.yaml").string() + " output.dir=" + (d / out).string() +
          " train.micro_batch_size=4 " + args + " --nnodes 2 --node-rank " + std::to_string(n) +
          " --nproc-per-node 1 --master-addr 127.0.0.1 --master-port " + std::to_string(port));
    });
  }
  for (auto& a : agents) a.join();
  for (const auto& r : results) EXPECT_EQ(r.code, 0) << r.out;
  return d / out;
}

// Two runs' losses within 1e-5 relative and their final weights within 1e-4 relative.
void expect_same_run(const fs::path& a, const fs::path& b) {
  const auto la = run_losses(a), lb = run_losses(b);
  ASSERT_EQ(la.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(lb.size(), static_cast<size_t>(kSteps)) << b;
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_NEAR(lb[i], la[i], 1e-5 * std::fabs(la[i])) << b << " step " << i + 1;
  }
  const fs::path adapters = a / "final" / "adapter_model.safetensors";
  const bool lora = fs::exists(adapters);
  double d2 = 0, x2 = 0;
  for (const auto& [name, s] :
       testing::squared_diffs(lora ? adapters : a / "final",
                              lora ? b / "final" / "adapter_model.safetensors" : b / "final")) {
    d2 += s.d2;
    x2 += s.x2;
  }
  EXPECT_LT(std::sqrt(d2 / x2), 1e-4) << b;
}

// The loss falls over 2.5 epochs of 16 pairs (it learns them).
TEST(Dpo, FirstLossIsLn2MetricsAreTrlsAndTheLossFalls) {
  // 16 pairs to train on (4 steps an epoch), 4 held out.
  const fs::path d = make_dpo_run("metrics", "", 20);
  const fs::path run = train(d, "run", "data.eval_split=0.2 optimizer.lr=1e-2");
  const auto rows = testing::run_metric_rows(run);
  ASSERT_EQ(rows.size(), static_cast<size_t>(kSteps));
  EXPECT_NEAR(rows[0].at("loss").get<double>(), std::log(2.0), 1e-6);
  for (const char* k : {"rewards/chosen", "rewards/rejected", "rewards/accuracies",
                        "rewards/margins", "logps/chosen", "logps/rejected"}) {
    EXPECT_TRUE(rows.back().contains(k)) << k << " " << rows.back().dump();
  }
  EXPECT_EQ(rows[0].at("pairs").get<int64_t>(), 4);
  EXPECT_NEAR(rows[0].at("rewards/margins").get<double>(), 0.0, 1e-9);
  EXPECT_LT(rows.back().at("loss").get<double>(), rows[0].at("loss").get<double>());
  EXPECT_GT(rows.back().at("rewards/margins").get<double>(), 0.0);
  // The evaluation at the end: the same six as eval_<name>, and eval_loss.
  EXPECT_TRUE(rows.back().contains("eval_loss")) << rows.back().dump();
  EXPECT_TRUE(rows.back().contains("eval_rewards/accuracies")) << rows.back().dump();
}

class DpoEquivalence : public ::testing::TestWithParam<bool> {};

TEST_P(DpoEquivalence, EveryStrategyAtTwoWorkersMatchesOneProcess) {
  const bool lora = GetParam();
  const fs::path d =
      make_dpo_run(lora ? "equiv_lora" : "equiv", lora ? "lora:\n  rank: 4\n  alpha: 8\n" : "");
  const fs::path one = train(d, "one", "");
  for (const char* strategy : {"full_shard", "shard_grad_op", "no_shard"}) {
    expect_same_run(one, train(d, std::string("w2_") + strategy,
                               "dist.nproc_per_node=2 train.micro_batch_size=4 dist.strategy=" +
                                   std::string(strategy)));
  }
  // hybrid_shard: two "nodes" of one worker each (sharded within, replicated across).
  expect_same_run(one, train_two_nodes(d, "w2_hybrid", "dist.strategy=hybrid_shard"));
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(FullAndLora, DpoEquivalence, ::testing::Bool());

TEST(Dpo, KilledWorkerRestartsAndFinishesBitIdentical) {
  const fs::path d = make_dpo_run("restart", "failure:\n  max_restarts: 2\n");
  const std::string two = "dist.nproc_per_node=2 train.micro_batch_size=4";
  const fs::path full = train(d, "full", two);
  // Rank 1 is SIGKILLed at the start of step 8 in the first attempt; the group restarts from
  // the newest committed checkpoint.
  const fs::path killed = d / "killed";
  const auto r = run_kiln(
      "train " + (d / "recipe.yaml").string() + " output.dir=" + killed.string() + " " + two,
      "KILN_FAULT=1:8:kill:0");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("restarting the group from the newest checkpoint"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
  const auto a = run_losses(full), b = run_losses(killed);
  ASSERT_EQ(a.size(), static_cast<size_t>(kSteps));
  ASSERT_GE(b.size(), static_cast<size_t>(kSteps));
  // metrics.jsonl reports the steps after the resumed checkpoint again: the last kSteps rows are
  // the run's.
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[a.size() - 1 - i], b[b.size() - 1 - i]) << "step " << kSteps - i;
  }
  for (const auto& [name, s] : testing::squared_diffs(full / "final", killed / "final")) {
    EXPECT_EQ(s.d2, 0.0) << name;
  }
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// dpo.precompute_reference: the reference's log-probabilities computed once before step 1 into
// output.dir/reference_logps.bin. The run follows the live reference's (the same numbers from
// other batch shapes: float precision), a restarted run reads the file (never computing it
// again) and finishes bit-identical, and evaluation reads its own part of it.
class DpoPrecomputed : public ::testing::TestWithParam<bool> {};

TEST_P(DpoPrecomputed, FollowsTheLiveReferenceAndRestartsFromTheFile) {
  const bool lora = GetParam();
  const fs::path d = make_dpo_run(
      lora ? "pre_lora" : "pre",
      std::string(lora ? "lora:\n  rank: 4\n  alpha: 8\n" : "") + "failure:\n  max_restarts: 2\n");
  const std::string two = "dist.nproc_per_node=2 train.micro_batch_size=4 data.eval_split=0.02 ";
  const fs::path live = train(d, "live", two);
  const fs::path pre = train(d, "pre", two + "dpo.precompute_reference=true");
  EXPECT_TRUE(fs::exists(pre / "reference_logps.bin"));
  expect_same_run(live, pre);
  const auto eval_of = [](const fs::path& run) {
    return testing::run_metric_rows(run).back().at("eval_loss").get<double>();
  };
  EXPECT_NEAR(eval_of(pre), eval_of(live), 1e-5 * eval_of(live));
  const auto r =
      run_kiln("train " + (d / "recipe.yaml").string() + " output.dir=" + (d / "killed").string() +
                   " " + two + "dpo.precompute_reference=true",
               "KILN_FAULT=1:8:kill:0");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("restarting the group from the newest checkpoint"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("dpo: reference log-probabilities from"), std::string::npos) << r.out;
  const fs::path a = lora ? pre / "final/adapter_model.safetensors" : pre / "final";
  const fs::path b = lora ? d / "killed/final/adapter_model.safetensors" : d / "killed/final";
  for (const auto& [name, s] : testing::squared_diffs(a, b)) EXPECT_EQ(s.d2, 0.0) << name;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(FullAndLora, DpoPrecomputed, ::testing::Bool());

// kiln plan says what the reference holds; kiln eval --format preference reports the loss and
// TRL's metrics (ln 2 and zero margins for the starting model against itself; positive margins
// for a model trained on the pairs against its start, and for a LoRA run's adapters against
// their base); kiln tokenize --show-loss shows both sequences of a pair.
TEST(Dpo, PlanEvalAndTokenizeSpeakPreference) {
  const fs::path d = make_dpo_run("cli", "", 40);
  const std::string recipe = (d / "recipe.yaml").string();
  const auto plan = [&](const std::string& args) {
    return run_kiln("plan " + recipe + " output.dir=" + (d / "plan").string() + args).out;
  };
  EXPECT_NE(plan("").find("dpo reference                     "), std::string::npos) << plan("");
  EXPECT_NE(plan("").find("(a frozen copy of the model"), std::string::npos);
  EXPECT_NE(plan(" lora.rank=4").find("(the base with the adapters off (no copy))"),
            std::string::npos);
  EXPECT_NE(plan(" dpo.precompute_reference=true").find("(precomputed before step 1"),
            std::string::npos);
  const auto eval = [&](const std::string& args) {
    const auto r = run_kiln("eval --json --format preference --data " +
                            (d / "pairs.jsonl").string() + " " + args);
    EXPECT_EQ(r.code, 0) << r.out;
    const size_t at = r.out.rfind("\n{");
    return Json::parse(r.out.substr(at == std::string::npos ? 0 : at + 1));
  };
  const std::string init = (d / "init").string();
  const Json self = eval("--model " + init + " --reference " + init);
  EXPECT_NEAR(self.at("loss").get<double>(), std::log(2.0), 1e-6) << self.dump();
  EXPECT_EQ(self.at("pairs").get<int64_t>(), 40);
  EXPECT_EQ(self.at("rewards/margins").get<double>(), 0.0);
  const fs::path full = train(d, "full", "optimizer.lr=1e-2");
  const Json trained = eval("--model " + (full / "final").string() + " --reference " + init);
  EXPECT_GT(trained.at("rewards/margins").get<double>(), 0.0) << trained.dump();
  EXPECT_GT(trained.at("rewards/accuracies").get<double>(), 0.5) << trained.dump();
  const fs::path lora = train(d, "lora", "optimizer.lr=1e-2 lora.rank=4 lora.alpha=8");
  const Json adapted = eval("--model " + init + " --adapter " + (lora / "final").string());
  EXPECT_GT(adapted.at("rewards/margins").get<double>(), 0.0) << adapted.dump();
  EXPECT_NE(adapted.at("loss").get<double>(), self.at("loss").get<double>());
  const auto r = run_kiln("eval --format preference --data " + (d / "pairs.jsonl").string() +
                          " --model " + init);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--reference: a model without adapters needs a reference model"),
            std::string::npos)
      << r.out;
  write_file_atomic(d / "text.jsonl",
                    "{\"prompt\": \"The sky is\", \"chosen\": \" blue.\", \"rejected\": "
                    "\" loud.\"}\n");
  const auto shown = run_kiln("tokenize --tokenizer " + std::string(KILN_SOURCE_DIR) +
                              "/assets/tokenizer/demo/tokenizer.json --show-loss --format "
                              "preference < " +
                              (d / "text.jsonl").string());
  EXPECT_EQ(shown.code, 0) << shown.out;
  EXPECT_NE(shown.out.find("The sky is[[ blue.<|endoftext|>]]\n# stdin:1 chosen: 5 of 11 tokens "
                           "take loss\nThe sky is[[ loud.<|endoftext|>]]\n# stdin:1 rejected"),
            std::string::npos)
      << shown.out;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// One line each, naming the file and line or the key, and a non-zero exit.
TEST(Dpo, BadInputIsOneLine) {
  const fs::path d = make_dpo_run("bad");
  const std::string recipe = (d / "recipe.yaml").string();
  int runs = 0;  // each run in a directory of its own
  const auto run = [&](const std::string& args) {
    const fs::path out = d / ("out" + std::to_string(++runs));
    return run_kiln("train " + recipe + " output.dir=" + out.string() + " " + args);
  };
  // A record missing `rejected`.
  write_file_atomic(d / "missing.jsonl",
                    "{\"prompt_input_ids\": [1, 2], \"chosen_input_ids\": [3, 4]}\n");
  auto r = run("data.train=" + (d / "missing.jsonl").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("missing.jsonl:1: missing field 'rejected_input_ids'"), std::string::npos)
      << r.out;
  // A pair whose two completions are the same is left out and counted.
  std::string same;
  for (int i = 0; i < 8; ++i) {
    same += "{\"prompt_input_ids\": [1, 2], \"chosen_input_ids\": [3, " + std::to_string(4 + i) +
            "], \"rejected_input_ids\": [3, " + std::to_string(i % 2 ? 4 + i : 90) + "]}\n";
  }
  write_file_atomic(d / "same.jsonl", same);
  r = run("data.train=" + (d / "same.jsonl").string() + " train.max_steps=1");
  EXPECT_NE(r.out.find("4 pairs left out: chosen equals rejected"), std::string::npos) << r.out;
  // Prompts longer than data.seq_len: cut from their start (truncate), or the pairs dropped.
  std::string long_pairs;
  for (int i = 0; i < 8; ++i) {
    std::string prompt = "1";
    for (int t = 0; t < 60; ++t) prompt += ", " + std::to_string(5 + t);
    long_pairs += "{\"prompt_input_ids\": [" + prompt + "], \"chosen_input_ids\": [3, " +
                  std::to_string(70 + i) + "], \"rejected_input_ids\": [4]}\n";
  }
  write_file_atomic(d / "long.jsonl", long_pairs);
  r = run("data.train=" + (d / "long.jsonl").string() + " train.max_steps=1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("8 truncated to seq_len 48"), std::string::npos) << r.out;
  r = run("data.train=" + (d / "long.jsonl").string() + " data.overlong=drop");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("no examples (8 longer than seq_len 48 dropped)"), std::string::npos)
      << r.out;
  // An odd micro-batch cannot hold whole pairs.
  r = run("train.micro_batch_size=3");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("train.micro_batch_size: 3 rows cannot hold whole pairs"), std::string::npos)
      << r.out;
  // A reference of another shape.
  const fs::path other = d / "other";
  ASSERT_EQ(run_kiln("init --config tiny-llama --out " + other.string()).code, 0);
  r = run("dpo.reference=" + other.string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("dpo.reference: " + other.string() +
                       "/config.json is not a model of the policy's shape"),
            std::string::npos)
      << r.out;
  // Preference data without a dpo section, and a dpo section on other data.
  r = run("data.train=" + std::string(KILN_SOURCE_DIR) +
          "/assets/demo/tokens.jsonl data.format=tokens");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("must be in format preference"), std::string::npos) << r.out;
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

}  // namespace
}  // namespace kiln
