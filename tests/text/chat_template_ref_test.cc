// Every renderer against its published templates rendered by Jinja2 as transformers renders them
// (tests/fixtures/data/chat_template_{ref,qwen3,llama3}.jsonl, made by tools/chat_template_ref.py
// from assets/chat_templates/): byte for byte.
#include <gtest/gtest.h>

#include <sstream>

#include "kiln/base/file.h"
#include "kiln/text/chat_messages.h"
#include "kiln/text/chat_template.h"

namespace kiln {
namespace {

const fs::path kData = fs::path(KILN_SOURCE_DIR) / "tests/fixtures/data";

// Renders each line of `file` with `tmpl` and compares; returns the number of lines.
int check_file(const ChatTemplate& tmpl, const fs::path& file) {
  std::istringstream in(read_file(file));
  int n = 0;
  for (std::string line; std::getline(in, line); ++n) {
    SCOPED_TRACE(file.filename().string() + ":" + std::to_string(n + 1));
    const OrderedJson j = parse_json_ordered(line, file.string());
    const std::vector<ChatMessage> messages = chat_messages_from_json(j.at("messages"), "messages");
    std::vector<OrderedJson> tools;
    if (j.contains("tools")) tools = chat_tools_from_json(j.at("tools"), "tools");
    ChatOptions o;
    o.add_generation_prompt = j.at("add_generation_prompt");
    if (j.contains("enable_thinking")) o.enable_thinking = j.at("enable_thinking").get<bool>();
    if (j.contains("date_string")) o.date_string = j.at("date_string");
    EXPECT_EQ(render_chat(tmpl, messages, tools, o), j.at("rendered").get<std::string>());
  }
  return n;
}

TEST(ChatTemplateReference, Qwen25) {
  EXPECT_EQ(check_file(chat_template(ChatTemplateId::kQwen25), kData / "chat_template_ref.jsonl"),
            26);
}

TEST(ChatTemplateReference, Qwen3) {
  EXPECT_EQ(check_file(chat_template(ChatTemplateId::kQwen3), kData / "chat_template_qwen3.jsonl"),
            27);
}

TEST(ChatTemplateReference, Llama3) {
  EXPECT_EQ(
      check_file(chat_template(ChatTemplateId::kLlama3), kData / "chat_template_llama3.jsonl"), 12);
}

}  // namespace
}  // namespace kiln
