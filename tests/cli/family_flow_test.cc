// A new user's whole LoRA flow for each family, through the binary (issue 34): `kiln init
// --tokenizer` with the family's real tokenizer (Qwen's vendored one for Qwen2.5 and Qwen3, the
// Llama-3-style one the suite generates for Llama 3) -> LoRA training -> `kiln eval` of a
// checkpoint (and of it as `--adapter`) -> `kiln generate --chat` with the checkpoint's adapters
// -> `kiln export` of the adapters and `export --merge`; the family's published chat template in
// every directory written, and every step agreeing with the others: the checkpoint evaluates as
// its exported adapter and as the merged model, and greedy generation with the checkpoint's
// adapters equals generation from the merged model.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>

#include "common/kiln_split.h"
#include "common/temp_dir.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"

namespace kiln {
namespace {

const fs::path kSource = KILN_SOURCE_DIR;

struct Family {
  const char* name;           // the test's name
  const char* preset;         // kiln init --config
  fs::path tokenizer;         // a tokenizer.json
  const char* jinja;          // the template its directories carry, under assets/chat_templates/
  const char* template_name;  // as --template names it
  // Another rendering of the same chat: tokenize options, or a field added to the record.
  const char* other_args;
  const char* other_field;
};

void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

const Family kFamilies[] = {
    {"Qwen25", "tiny", kSource / "assets/tokenizer/qwen3/tokenizer.json", "qwen2.5.jinja",
     "qwen2.5", "--template qwen3", ""},
    {"Qwen3", "tiny-qwen3", kSource / "assets/tokenizer/qwen3/tokenizer.json", "qwen3.jinja",
     "qwen3", "--template qwen2.5", ""},
    {"Llama3", "tiny-llama", kSource / "tests/fixtures/tokenizer/llama3_tiny_tokenizer.json",
     "llama3.1.jinja", "llama3", "", R"(, "date_string": "01 Jan 2020")"},
};

class FamilyFlow : public ::testing::TestWithParam<Family> {
 protected:
  std::string p(const std::string& name) const { return (dir_ / name).string(); }
  testing::SplitResult kiln(const std::string& args) const {
    return testing::run_kiln_split(args, dir_);
  }
  // `kiln <args>` must succeed; its stdout.
  std::string ok(const std::string& args) const {
    const testing::SplitResult r = kiln(args);
    EXPECT_EQ(r.code, 0) << "kiln " << args << "\n" << r.out << r.err;
    return r.out;
  }
  double eval_loss(const std::string& args) const {
    const std::string out = ok("eval " + args + " --data " + p("chat.jsonl") + " --json");
    return Json::parse(out).at("loss").get<double>();
  }
  // The chat template a directory kiln wrote carries.
  std::string chat_template(const std::string& dir) const {
    return read_json_file(fs::path(p(dir)) / "tokenizer_config.json")
        .at("chat_template")
        .get<std::string>();
  }
  std::string published() const {
    return read_file(kSource / "assets/chat_templates" / GetParam().jinja);
  }
  // The ids of one chat as `kiln tokenize --chat` renders it with `args` (`--tokenizer DIR`: the
  // template the directory carries, as generate and eval choose it).
  std::string chat_ids(const std::string& args, const std::string& extra_field = "") const {
    const testing::SplitResult r = testing::run_kiln_split(
        "tokenize --chat " + args, dir_,
        R"({"messages": [{"role": "user", "content": "What is the capital of Canada?"}])" +
            extra_field + "}\n");
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    return r.out;
  }
  std::string greedy_reply(const std::string& model_args) const {
    return ok("generate " + model_args +
              " --chat --prompt 'What is the capital of Canada?' --temperature 0 "
              "--max-new-tokens 8");
  }

  void write_inputs() const {
    // The first 24 conversations of the demo's chat data: training and evaluation alike. Llama
    // 3.1's template opens with a dated system block, which the test tokenizer spells out in
    // bytes: 256 tokens keep every reply.
    const std::string all = read_file(kSource / "assets/demo/chat.jsonl");
    size_t end = 0;
    for (int i = 0; i < 24; ++i) end = all.find('\n', end) + 1;
    write_file_atomic(p("chat.jsonl"), all.substr(0, end));
    write_file_atomic(p("lora.yaml"), fmt::format(R"(model: {{path: {}}}
lora: {{rank: 4, alpha: 8}}
data: {{train: {}, format: chat, seq_len: 256}}
optimizer: {{lr: 2.0e-2}}
train: {{max_steps: 4, micro_batch_size: 2, log_every: 1}}
checkpoint: {{every_steps: 2, keep_last: 2}}
output: {{dir: {}}}
dist: {{threads_per_worker: 2}}
)",
                                                  p("base"), p("chat.jsonl"), p("run")));
  }

  testing::TempDir tmp_{"kiln_family_flow"};
  const fs::path dir_ = tmp_.path();
};

TEST_P(FamilyFlow, InitTrainEvalGenerateExportWithTheFamilysTemplate) {
  const Family& f = GetParam();
  ok(fmt::format("init --config {} --seed 5 --tokenizer {} --out {}", f.preset,
                 f.tokenizer.string(), p("base")));
  EXPECT_EQ(chat_template("base"), published());
  write_inputs();
  ok("train " + p("lora.yaml"));
  EXPECT_EQ(chat_template("run/final"), published());  // the PEFT adapter directory
  EXPECT_TRUE(fs::exists(fs::path(p("run/final")) / "adapter_config.json"));

  // A checkpoint evaluates as the base with its adapters, whichever way it is named.
  const std::string ckpt = p("run/checkpoints/step-00000004");
  const double base = eval_loss("--model " + p("base"));
  const double as_model = eval_loss("--model " + ckpt);
  const double as_adapter = eval_loss("--model " + p("base") + " --adapter " + ckpt);
  EXPECT_NEAR(as_adapter, as_model, 1e-6 * as_model);
  EXPECT_GT(std::abs(as_model - base), 1e-4) << "the adapters changed nothing";

  // Exported adapters and the merged model evaluate as the checkpoint; both carry the template.
  ok("export --checkpoint " + p("run") + " --out " + p("adapter"));
  ok("export --checkpoint " + p("run") + " --merge --dtype f32 --out " + p("merged"));
  EXPECT_EQ(chat_template("adapter"), published());
  EXPECT_EQ(chat_template("merged"), published());
  EXPECT_NEAR(eval_loss("--model " + p("base") + " --adapter " + p("adapter")), as_model,
              1e-5 * as_model);
  EXPECT_NEAR(eval_loss("--model " + p("merged")), as_model, 1e-4 * as_model);

  // Chat with the checkpoint's adapters (unmerged) answers as the merged model does; the prompt
  // is rendered with the family's template in both (the directories' own).
  const std::string reply = greedy_reply("--model " + p("base") + " --adapter " + ckpt);
  EXPECT_FALSE(reply.empty());
  EXPECT_EQ(greedy_reply("--model " + p("merged")), reply);
  EXPECT_EQ(greedy_reply("--model " + ckpt), reply);
  // Each directory written renders a chat with the family's template: as naming it explicitly,
  // and not as another rendering (the other Qwen template; Llama 3.1's system block with another
  // date), which would give other ids.
  const std::string ids = chat_ids("--tokenizer " + p("base") + " --template " + f.template_name);
  for (const char* dir : {"base", "run/final", "adapter", "merged"}) {
    EXPECT_EQ(chat_ids("--tokenizer " + p(dir)), ids) << dir;
  }
  EXPECT_NE(chat_ids("--tokenizer " + p("merged") + " " + f.other_args, f.other_field), ids);
}

// The README's recipe for a real small model is a valid recipe (planned on the preset of the
// same shape, since tests download nothing).
TEST(RealModelRecipe, PlansOnItsPreset) {
  testing::TempDir tmp("kiln_real_model_recipe");
  const testing::SplitResult r = testing::run_kiln_split(
      "plan " + (kSource / "examples/lora-qwen3-0.6b.yaml").string() + " model.path=qwen3-0.6b",
      tmp.path());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("LoRA rank 16"), std::string::npos) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyFlow, ::testing::ValuesIn(kFamilies),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kiln
