// A fine-tune's model directories are complete Hugging Face directories: final/, every
// checkpoint and `kiln export` hold the base's config.json (only torch_dtype changed), the
// weights, tokenizer.json, tokenizer_config.json (the base's chat template byte for byte, or the
// one the run rendered with when data.template names another, or kiln's Qwen2.5 template when
// the base has none), generation_config.json and the base's other tokenizer files; they load back
// into kiln with the same eval loss and serve as a base for another run.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/background_kiln.h"
#include "common/run_kiln.h"
#include "common/temp_dir.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/io/checkpoint_reader.h"

namespace kiln {
namespace {

using OJson = nlohmann::ordered_json;
using testing::CmdResult;

const fs::path kTokenizer =
    fs::path(KILN_SOURCE_DIR) / "tests/fixtures/tokenizer/tiny_tokenizer.json";
const fs::path kChat = fs::path(KILN_SOURCE_DIR) / "assets/demo/chat.jsonl";
constexpr int64_t kImEnd = 658;  // <|im_end|> in the tiny tokenizer

class HfOutput : public ::testing::Test {
 protected:
  fs::path p(const std::string& name) const { return dir_ / name; }
  CmdResult kiln(const std::string& args) const { return testing::run_kiln(args); }

  // A base model as a Qwen2.5 release ships it: config fields kiln does not model, its own eos,
  // a chat template, a generation config and legacy tokenizer files.
  fs::path make_full_base() const {
    const fs::path base = p("base");
    EXPECT_EQ(kiln("init --config tiny --seed 1 --out " + base.string()).code, 0);
    OJson c = OJson::parse(read_file(base / "config.json"));
    c["eos_token_id"] = kImEnd;
    c["bos_token_id"] = 656;
    c["sliding_window"] = 4096;
    c["max_window_layers"] = 21;
    c["initializer_range"] = 0.02;
    c["rope_scaling"] = nullptr;
    c["torch_dtype"] = "bfloat16";
    c["transformers_version"] = "4.43.1";
    write_file_atomic(base / "config.json", c.dump(2));
    fs::copy_file(kTokenizer, base / "tokenizer.json");
    write_file_atomic(base / "tokenizer_config.json",
                      "{\n  \"chat_template\": \"{%- for m in messages %}{{ m.content }}"
                      "{%- endfor %}  \\u00e9\\n\",\n  \"eos_token\": \"<|im_end|>\",\n"
                      "  \"model_max_length\": 131072\n}\n");
    write_file_atomic(base / "generation_config.json",
                      "{\"eos_token_id\": [658, 656], \"top_p\": 0.8, \"temperature\": 0.7}\n");
    write_file_atomic(base / "vocab.json", "{\"a\": 0}\n");
    write_file_atomic(base / "merges.txt", "#version: 0.2\n");
    return base;
  }

  fs::path write_recipe(const fs::path& base, const std::string& run) const {
    const fs::path r = p(run + ".yaml");
    write_file_atomic(r,
                      // The base's template is its own (not one kiln knows): data.template says
                      // which renders the data, and the model directories carry that one.
                      fmt::format("model:\n  path: {}\ndata:\n  train: {}\n  format: chat\n"
                                  "  template: qwen2.5\n"
                                  "  seq_len: 96\n  eval: {}\noptimizer:\n  lr: 1.0e-2\n"
                                  "train:\n  max_steps: 4\n  micro_batch_size: 2\n"
                                  "eval:\n  max_batches: 4\ncheckpoint:\n  every_steps: 2\n"
                                  "  keep_last: 0\noutput:\n  dir: {}\n",
                                  base.string(), kChat.string(), kChat.string(), p(run).string()));
    return r;
  }

  double eval_loss(const fs::path& model) const {
    CmdResult r = kiln("eval --json --model " + model.string() + " --data " + kChat.string() +
                       " --format chat --template qwen2.5 --seq-len 96");
    EXPECT_EQ(r.code, 0) << r.out;
    const size_t brace = r.out.rfind('{');
    return parse_json(r.out.substr(brace), "eval").at("loss").get<double>();
  }
  testing::TempDir tmp_{"kiln_hf_output"};
  const fs::path dir_ = tmp_.path();
};

// What a transformers or vLLM user needs, with the base's values: every file of the base
// (other than weights) is there byte for byte, except config.json, which equals the base's in
// every field (and order) but torch_dtype, and tokenizer_config.json, whose chat template is the
// published text of the run's data.template (qwen2.5) in place of the base's.
void expect_servable(const fs::path& dir, const fs::path& base, const std::string& torch_dtype) {
  SCOPED_TRACE(dir.string());
  OJson want = OJson::parse(read_file(base / "config.json"));
  want["torch_dtype"] = torch_dtype;
  const OJson got = OJson::parse(read_file(dir / "config.json"));
  EXPECT_EQ(got, want);
  EXPECT_EQ(got.dump(), want.dump());  // ordered: the same keys in the same order
  for (const char* f : {"tokenizer.json", "generation_config.json", "vocab.json", "merges.txt"}) {
    ASSERT_TRUE(fs::exists(dir / f)) << f;
    EXPECT_EQ(read_file(dir / f), read_file(base / f)) << f;
  }
  OJson tc = OJson::parse(read_file(base / "tokenizer_config.json"));
  tc["chat_template"] =
      read_file(fs::path(KILN_SOURCE_DIR) / "assets/chat_templates/qwen2.5.jinja");
  EXPECT_EQ(OJson::parse(read_file(dir / "tokenizer_config.json")).dump(), tc.dump());
  // A model directory's weights; a checkpoint's shards are behind its manifest.
  EXPECT_TRUE(fs::exists(dir / "model.safetensors") || fs::exists(dir / "manifest.json"));
}

TEST_F(HfOutput, FinalCheckpointsAndExportsKeepTheBaseFiles) {
  const fs::path base = make_full_base();
  CmdResult r = kiln("train " + write_recipe(base, "run").string());
  ASSERT_EQ(r.code, 0) << r.out;
  // The base's template is one kiln does not know: a warning that data.template renders the data
  // instead, and a line that the run's directories carry it.
  const std::string own = (base / "tokenizer_config.json").string();
  const std::string warning = own +
                              ": the model's own chat template is not one kiln knows; "
                              "data.template renders the data with qwen2.5";
  EXPECT_NE(r.out.find(warning), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("final/: chat template qwen2.5 (data.template) replaces the base's "
                       "template at " +
                       own),
            std::string::npos)
      << r.out;
  // The same warning when the data's tokens come from the cache.
  r = kiln("prepare-data " + p("run.yaml").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("data cache hit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(warning), std::string::npos) << r.out;
  expect_servable(p("run/final"), base, "float32");
  expect_servable(p("run/checkpoints/step-00000002"), base, "float32");
  // kiln export of a checkpoint, of a run directory (its final/) in bf16, and of a model dir.
  ASSERT_EQ(kiln("export --checkpoint " + p("run/checkpoints/step-00000002").string() + " --out " +
                 p("exp2").string())
                .code,
            0);
  expect_servable(p("exp2"), base, "float32");
  ASSERT_EQ(kiln("export --checkpoint " + p("run").string() + " --out " + p("bf16").string() +
                 " --dtype bf16")
                .code,
            0);
  expect_servable(p("bf16"), base, "bfloat16");
  ASSERT_EQ(kiln("export --checkpoint " + p("run/checkpoints/step-00000004").string() + " --out " +
                 p("exp4").string())
                .code,
            0);
  expect_servable(p("exp4"), base, "float32");

  // final/ and the export of the last checkpoint load back with the same eval loss.
  const double final_loss = eval_loss(p("run/final"));
  EXPECT_EQ(eval_loss(p("exp4")), final_loss);
  // final/ is itself a base: a second run from it keeps the same files.
  r = kiln("train " + write_recipe(p("run/final"), "run2").string() + " train.max_steps=1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("replaces the base's"), std::string::npos) << r.out;  // its own now
  expect_servable(p("run2/final"), base, "float32");
}

TEST_F(HfOutput, BaseWithoutTemplateGetsQwenTemplateAndDerivedGenerationConfig) {
  const fs::path base = p("base");
  ASSERT_EQ(kiln("init --config tiny --seed 1 --out " + base.string()).code, 0);
  fs::copy_file(kTokenizer, base / "tokenizer.json");
  ASSERT_EQ(kiln("export --checkpoint " + base.string() + " --out " + p("out").string()).code, 0);
  const Json tc = read_json_file(p("out/tokenizer_config.json"));
  EXPECT_EQ(tc.at("chat_template").get<std::string>(),
            read_file(fs::path(KILN_SOURCE_DIR) / "assets/chat_templates/qwen2.5.jinja"));
  EXPECT_EQ(tc.at("eos_token"), "<|im_end|>");
  EXPECT_EQ(tc.at("pad_token"), "<|endoftext|>");
  EXPECT_EQ(tc.at("tokenizer_class"), "Qwen2Tokenizer");
  EXPECT_EQ(tc.at("added_tokens_decoder").at("658").at("content"), "<|im_end|>");
  // kiln init's config names eos 151643, outside the tiny vocabulary: only <|im_end|> stays.
  const Json gc = read_json_file(p("out/generation_config.json"));
  EXPECT_EQ(gc.at("eos_token_id"), kImEnd);
  EXPECT_EQ(gc.at("pad_token_id"), 656);
  EXPECT_EQ(read_file(p("out/tokenizer.json")), read_file(kTokenizer));
  EXPECT_FALSE(fs::exists(p("out/vocab.json")));

  // A base tokenizer_config.json without a template keeps its fields and gains the template.
  write_file_atomic(base / "tokenizer_config.json",
                    "{\"eos_token\": {\"content\": \"<|endoftext|>\"}, \"model_max_length\": 7}");
  ASSERT_EQ(kiln("export --checkpoint " + base.string() + " --out " + p("out2").string()).code, 0);
  const Json tc2 = read_json_file(p("out2/tokenizer_config.json"));
  EXPECT_EQ(tc2.at("model_max_length"), 7);
  EXPECT_EQ(tc2.at("chat_template"), tc.at("chat_template"));
  EXPECT_EQ(read_json_file(p("out2/generation_config.json")).at("eos_token_id"), 656);
}

// The base's files are read once, at start: a base directory that moves (or is unmounted) while
// the run trains does not fail its later checkpoints or final/, which still hold its files.
TEST_F(HfOutput, ABaseThatMovesMidRunDoesNotFailLaterSaves) {
  const fs::path base = make_full_base();
  const fs::path recipe = write_recipe(base, "run");
  testing::BackgroundKiln run({"train", recipe.string(), "train.max_steps=40",
                               "checkpoint.every_steps=1", "checkpoint.keep_last=2"},
                              p("run.log"));
  // Some committed checkpoint: keep_last=2 soon deletes step 1's, so a poller that a loaded
  // machine delays can miss that one, never all of them.
  const auto committed = [&] {
    std::error_code ec;  // entries may vanish while listed: no throwing increments
    for (fs::directory_iterator it(p("run/checkpoints"), ec), end; !ec && it != end;
         it.increment(ec)) {
      if (fs::exists(it->path() / "manifest.json", ec)) return true;
    }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!committed() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(committed()) << run.log();
  fs::rename(base, p("moved"));
  ASSERT_FALSE(fs::exists(p("run/final"))) << "the run ended before its base moved";
  ASSERT_EQ(run.wait(std::chrono::milliseconds(120000)), 0) << run.log();
  expect_servable(p("run/final"), p("moved"), "float32");
  expect_servable(p("run/checkpoints/step-00000040"), p("moved"), "float32");
}

TEST_F(HfOutput, ModelWithoutTokenizerStillExports) {
  ASSERT_EQ(kiln("init --config tiny --out " + p("base").string()).code, 0);
  CmdResult r = kiln("export --checkpoint " + p("base").string() + " --out " + p("out").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("no tokenizer.json"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(p("out/generation_config.json")));
  EXPECT_FALSE(fs::exists(p("out/tokenizer_config.json")));
  EXPECT_TRUE(fs::exists(p("out/model.safetensors")));
}

}  // namespace
}  // namespace kiln
