// The chat template a model directory kiln writes carries: the base's own, byte for byte, or,
// when the base has none, the published text of the template the run chose.
#include "kiln/model_files/hf_model_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "common/temp_dir.h"
#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/model_files/tokenizer_fit.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/chat_template_choice.h"

namespace kiln {
namespace {

const fs::path kLlamaTokenizer =
    fs::path(KILN_SOURCE_DIR) / "tests/fixtures/tokenizer/llama3_tiny_tokenizer.json";

class HfModelFilesTemplate : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ / "base");
    write_file_atomic(dir_ / "base/config.json",
                      R"({"model_type": "llama", "vocab_size": 128256})");
    fs::copy_file(kLlamaTokenizer, dir_ / "base/tokenizer.json");
  }

  Json written(const std::string& chat_template) {
    HfModelFiles::read(dir_ / "base", {}, chat_template).write(dir_ / "out", "float32");
    return parse_json(read_file(dir_ / "out/tokenizer_config.json"), "out");
  }

  testing::TempDir tmp_{"kiln_hf_files"};
  const fs::path dir_ = tmp_.path();
};

TEST_F(HfModelFilesTemplate, BaseWithoutAnyGetsTheChosenOne) {
  const Json cfg = written("llama3");
  EXPECT_EQ(cfg.at("chat_template"), chat_template(ChatTemplateId::kLlama3).jinja());
  EXPECT_EQ(cfg.at("bos_token"), "<|begin_of_text|>");  // the template renders {{ bos_token }}
  EXPECT_EQ(cfg.at("eos_token"), "<|eot_id|>");
  EXPECT_EQ(cfg.at("tokenizer_class"), "PreTrainedTokenizerFast");
  // The directory written is one kiln recognises as the same template.
  EXPECT_EQ(model_chat_template(dir_ / "out").known, ChatTemplateId::kLlama3);
  const Json gen = parse_json(read_file(dir_ / "out/generation_config.json"), "gen");
  EXPECT_EQ(gen.at("eos_token_id"), 128009);
}

TEST_F(HfModelFilesTemplate, ConfigWithoutTemplateGainsTheChosenOne) {
  write_file_atomic(dir_ / "base/tokenizer_config.json", R"({"model_max_length": 7})");
  const Json cfg = written("qwen3");
  EXPECT_EQ(cfg.at("model_max_length"), 7);
  EXPECT_EQ(cfg.at("chat_template"), chat_template(ChatTemplateId::kQwen3).jinja());
  // data.template empty: kiln's default.
  EXPECT_EQ(written("").at("chat_template"), chat_template(ChatTemplateId::kQwen25).jinja());
}

TEST_F(HfModelFilesTemplate, BaseTemplateIsKeptByteForByte) {
  const std::string own = "{\"chat_template\": \"{{ messages }}\", \"x\": 1}\n";
  write_file_atomic(dir_ / "base/tokenizer_config.json", own);
  written("");
  EXPECT_EQ(read_file(dir_ / "out/tokenizer_config.json"), own);
  EXPECT_TRUE(HfModelFiles::read(dir_ / "base").replaced_chat_template().empty());
  EXPECT_THROW(written("chatml"), Error);
}

// A template asked for replaces the base's own (the run rendered with it): tokenizer_config.json's
// chat_template, its other fields kept; a chat_template.jinja, which transformers reads first, is
// left out. The base's own kept when it is the one asked for.
TEST_F(HfModelFilesTemplate, TemplateAskedForReplacesTheBasesOwn) {
  write_file_atomic(dir_ / "base/tokenizer_config.json",
                    "{\"chat_template\": \"{{ messages }}\", \"x\": 1}\n");
  const Json cfg = written("llama3");
  EXPECT_EQ(cfg.at("chat_template"), chat_template(ChatTemplateId::kLlama3).jinja());
  EXPECT_EQ(cfg.at("x"), 1);
  EXPECT_EQ(HfModelFiles::read(dir_ / "base", {}, "llama3").replaced_chat_template(),
            "template at " + (dir_ / "base/tokenizer_config.json").string());

  write_file_atomic(dir_ / "base/chat_template.jinja",
                    std::string(chat_template(ChatTemplateId::kQwen3).jinja()));
  EXPECT_EQ(HfModelFiles::read(dir_ / "base", {}, "llama3").replaced_chat_template(), "qwen3");
  fs::remove_all(dir_ / "out");
  written("llama3");
  EXPECT_FALSE(fs::exists(dir_ / "out/chat_template.jinja"));
  EXPECT_EQ(model_chat_template(dir_ / "out").known, ChatTemplateId::kLlama3);
  // Asking for the base's own changes nothing.
  EXPECT_TRUE(HfModelFiles::read(dir_ / "base", {}, "qwen3").replaced_chat_template().empty());
  fs::remove_all(dir_ / "out");
  written("qwen3");
  EXPECT_EQ(read_file(dir_ / "out/chat_template.jinja"),
            chat_template(ChatTemplateId::kQwen3).jinja());
}

// The special tokens a template's models take (kiln init) end replies exactly where the template
// stops generation: the generation eos list is the template's stop tokens.
TEST(ChatModelTokens, GenerationEosIsTheTemplatesStopTokens) {
  for (const std::string& name : chat_template_names()) {
    const ChatTemplate& t = *chat_template_named(name);
    const ChatModelTokens& tokens = chat_model_tokens(t.id());
    auto stops = t.stop_tokens();
    auto gen = tokens.generation_eos;
    std::sort(stops.begin(), stops.end());
    std::sort(gen.begin(), gen.end());
    EXPECT_EQ(gen, stops) << name;
    EXPECT_NE(std::find(gen.begin(), gen.end(), tokens.eos), gen.end()) << name;
  }
  EXPECT_EQ(family_chat_template(ModelFamily::kQwen2), ChatTemplateId::kQwen25);
  EXPECT_EQ(family_chat_template(ModelFamily::kQwen3), ChatTemplateId::kQwen3);
  EXPECT_EQ(family_chat_template(ModelFamily::kLlama), ChatTemplateId::kLlama3);
}

}  // namespace
}  // namespace kiln
