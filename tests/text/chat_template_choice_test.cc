// Which chat template a model gets: its own when it is a published text kiln knows (by content),
// the setting when given, qwen2.5 for a model without any, else an error naming the setting.
#include "kiln/text/chat_template_choice.h"

#include <gtest/gtest.h>

#include "common/error_of.h"
#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/text/published_templates.h"
#include "text_test_util.h"

namespace kiln {
namespace {

std::string asset(const std::string& file) {
  return read_file(fs::path(KILN_SOURCE_DIR) / "assets/chat_templates" / file);
}

void write_config(const fs::path& dir, const Json& chat_template) {
  write_file_atomic(dir / "tokenizer_config.json",
                    Json{{"eos_token", "<|im_end|>"}, {"chat_template", chat_template}}.dump(2));
}

std::string choice_error(const fs::path& dir, std::string_view setting) {
  return testing::error_of([&] { choose_chat_template(dir, setting, "data.template"); });
}

// The embedded texts are the asset files, byte for byte.
TEST(ChatTemplateChoice, EmbeddedTextsAreTheAssets) {
  ASSERT_EQ(published_chat_templates().size(), 5u);
  for (const PublishedChatTemplate& t : published_chat_templates()) {
    EXPECT_EQ(t.text, asset(std::string(t.file))) << t.file;
  }
  EXPECT_EQ(chat_template(ChatTemplateId::kQwen25).jinja(), asset("qwen2.5.jinja"));
  EXPECT_EQ(chat_template(ChatTemplateId::kQwen3).jinja(), asset("qwen3.jinja"));
  EXPECT_EQ(chat_template(ChatTemplateId::kLlama3).jinja(), asset("llama3.1.jinja"));
}

TEST(ChatTemplateChoice, KnownByContent) {
  const fs::path dir = test::fresh_temp_dir("choice");
  const std::pair<const char*, ChatTemplateId> cases[] = {
      {"qwen2.5.jinja", ChatTemplateId::kQwen25},
      {"qwen3.jinja", ChatTemplateId::kQwen3},
      {"qwen3-2504.jinja", ChatTemplateId::kQwen3},
      {"llama3.1.jinja", ChatTemplateId::kLlama3},
      {"llama3.2.jinja", ChatTemplateId::kLlama3}};
  for (const auto& [file, id] : cases) {
    write_config(dir, asset(file) + "\n");  // a trailing line break does not matter
    EXPECT_EQ(choose_chat_template(dir, "", "data.template").id(), id) << file;
    EXPECT_EQ(model_chat_template(dir / "tokenizer.json").known, id) << file;
  }
  // The setting wins over the model's own.
  EXPECT_EQ(choose_chat_template(dir, "qwen2.5", "data.template").id(), ChatTemplateId::kQwen25);
  // A list of named templates: the "default" one.
  write_config(dir, Json::array({{{"name", "tool_use"}, {"template", "x"}},
                                 {{"name", "default"}, {"template", asset("qwen3.jinja")}}}));
  EXPECT_EQ(choose_chat_template(dir, "", "data.template").id(), ChatTemplateId::kQwen3);
  // chat_template.jinja beside the config takes precedence, as in transformers.
  write_file_atomic(dir / "chat_template.jinja", asset("llama3.2.jinja"));
  EXPECT_EQ(choose_chat_template(dir, "", "data.template").id(), ChatTemplateId::kLlama3);
  EXPECT_EQ(model_chat_template(dir).where, (dir / "chat_template.jinja").string());
  fs::remove_all(dir);
}

TEST(ChatTemplateChoice, NoTemplateIsQwen25) {
  const fs::path dir = test::fresh_temp_dir("choice");
  EXPECT_EQ(choose_chat_template(dir, "", "data.template").id(), ChatTemplateId::kQwen25);
  write_file_atomic(dir / "tokenizer_config.json", R"({"eos_token": "<|im_end|>"})");
  EXPECT_EQ(choose_chat_template(dir, "", "data.template").id(), ChatTemplateId::kQwen25);
  EXPECT_EQ(model_chat_template(dir).where, "");
  fs::remove_all(dir);
}

TEST(ChatTemplateChoice, UnknownTemplateNamesTheKey) {
  const fs::path dir = test::fresh_temp_dir("choice");
  std::string edited = asset("qwen3.jinja");
  edited.replace(edited.find("# Tools"), 7, "# TOOLS");  // one word differs: not the published text
  write_config(dir, edited);
  const std::string cfg = (dir / "tokenizer_config.json").string();
  EXPECT_EQ(choice_error(dir, ""),
            cfg +
                ": its chat template is not one kiln knows; set data.template to the one it "
                "renders (qwen2.5, qwen3 or llama3)");
  EXPECT_EQ(choose_chat_template(dir, "qwen3", "data.template").id(), ChatTemplateId::kQwen3);
  EXPECT_EQ(choice_error(dir, "chatml"),
            "data.template is 'chatml', expected qwen2.5, qwen3 or llama3");
  write_config(dir, 7);
  EXPECT_EQ(choice_error(dir, ""),
            cfg + ": chat_template is a JSON number, expected a string or a list");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
