// The Llama 3 renderer: its pieces, what it refuses, and its encoding with a Llama 3 tokenizer
// (one <|begin_of_text|>, the template's own). Its rendering is held byte for byte to the
// published templates in chat_template_ref_test.cc.
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "kiln/base/error.h"
#include "kiln/text/chat_template.h"
#include "text_test_util.h"

namespace kiln {
namespace {

const ChatTemplate& llama() { return chat_template(ChatTemplateId::kLlama3); }

std::string error(const std::vector<ChatMessage>& m, const std::vector<OrderedJson>& tools = {}) {
  return testing::error_of([&] { llama().pieces(m, tools, {}); });
}

TEST(Llama3Chat, ReplyIsTheTrimmedContentAndEotId) {
  const std::vector<ChatPiece> p = llama().pieces({{"user", "Hi"}, {"assistant", " Hello \n"}}, {},
                                                  {.date_string = "1 Jan 2025"});
  std::string reply, all;
  for (const ChatPiece& piece : p) {
    all += piece.text;
    if (piece.reply) reply += piece.text;
  }
  EXPECT_EQ(reply, "Hello<|eot_id|>");
  EXPECT_EQ(all,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge "
            "Date: December 2023\nToday Date: 1 Jan 2025\n\n<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
            "Hello<|eot_id|>");
  EXPECT_EQ(llama().stop_tokens(),
            (std::vector<std::string_view>{"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"}));
  EXPECT_FALSE(llama().has_thinking());
}

TEST(Llama3Chat, RefusesWhatTheTemplateWouldDropOrRaise) {
  ChatMessage two{"assistant", ""};
  two.tool_calls = {{"f", "{}"}, {"g", "{}"}};
  EXPECT_EQ(error({{"user", "q"}, two}),
            "messages[1].tool_calls: the llama3 chat template takes one tool call per message, "
            "not 2");
  ChatMessage with_content{"assistant", "Let me check."};
  with_content.tool_calls = {{"f", "{}"}};
  EXPECT_EQ(error({{"user", "q"}, with_content}),
            "messages[1].content: the llama3 chat template drops the content of a message with a "
            "tool call");
  const std::vector<OrderedJson> tools = {OrderedJson::object()};
  EXPECT_EQ(error({{"system", "s"}}, tools),
            "tools: the llama3 chat template puts them in the first user message, and there is "
            "none");
  EXPECT_EQ(error({{"system", "s"}, {"assistant", "a"}}, tools),
            "messages[1].role is 'assistant': with tools, the llama3 chat template renders this "
            "message as the user's, so it must be user");
}

TEST(Llama3Chat, EncodesOneBeginOfText) {
  const Tokenizer& t = test::tiny_llama3();
  const std::vector<ChatMessage> m = {{"user", "hello"}, {"assistant", "hello world"}};
  for (const bool parse_special : {true, false}) {
    const std::vector<int32_t> ids = encode_chat(t, llama(), m, {}, {}, parse_special);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 128000);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 128000), 1);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 128009), 3);  // system, user, assistant
    // The end: <|start_header_id|> assistant <|end_header_id|> "\n\n" "hello world" <|eot_id|>
    // ("assistant" is bytes: 64 82 82 72 82 83 64 77 83).
    const std::vector<int32_t> tail(ids.end() - 15, ids.end());
    EXPECT_EQ(tail, (std::vector<int32_t>{128006, 64, 82, 82, 72, 82, 83, 64, 77, 83, 128007, 267,
                                          260, 264, 128009}));
    EXPECT_EQ(t.decode(ids), render_chat(llama(), m, {}, {}));
  }
}

}  // namespace
}  // namespace kiln
