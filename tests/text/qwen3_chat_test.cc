// The Qwen3 renderer's pieces: what is the reply (loss in training) and what the prompt. Its
// rendering is held byte for byte to the published template in chat_template_ref_test.cc.
#include <gtest/gtest.h>

#include "kiln/text/chat_template.h"

namespace kiln {
namespace {

const ChatTemplate& qwen3() { return chat_template(ChatTemplateId::kQwen3); }

// The text of the reply pieces and of the others, in order.
std::pair<std::string, std::string> split(const std::vector<ChatPiece>& pieces) {
  std::string reply, prompt;
  for (const ChatPiece& p : pieces) (p.reply ? reply : prompt) += p.text;
  return {reply, prompt};
}

TEST(Qwen3Chat, ThinkBlockIsPartOfTheReply) {
  std::vector<ChatMessage> m = {{"user", "2+2?"}, {"assistant", "4"}};
  m[1].reasoning_content = "Add.";
  const auto [reply, prompt] = split(qwen3().pieces(m, {}, {}));
  EXPECT_EQ(reply, "<think>\nAdd.\n</think>\n\n4<|im_end|>");
  EXPECT_EQ(prompt, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n\n");
  EXPECT_TRUE(qwen3().has_thinking());
}

TEST(Qwen3Chat, EmptyThinkBlockIsThePromptWithThinkingOff) {
  const std::vector<ChatMessage> m = {{"user", "Hi"}, {"assistant", "Hello"}};
  // On (the default): the model learns to write the empty block itself.
  EXPECT_EQ(split(qwen3().pieces(m, {}, {})).first, "<think>\n\n</think>\n\nHello<|im_end|>");
  EXPECT_EQ(split(qwen3().pieces(m, {}, {.enable_thinking = true})).first,
            "<think>\n\n</think>\n\nHello<|im_end|>");
  // Off: the block is given, as the generation prompt gives it at inference.
  const std::vector<ChatPiece> off = qwen3().pieces(m, {}, {.enable_thinking = false});
  EXPECT_EQ(split(off).first, "Hello<|im_end|>");
  const ChatPiece& header = off[off.size() - 4];
  EXPECT_EQ(header.text, "assistant\n<think>\n\n</think>\n\n");
  EXPECT_FALSE(header.reply);
  // The same text either way.
  EXPECT_EQ(render_chat(qwen3(), m, {}, {.enable_thinking = false}),
            render_chat(qwen3(), m, {}, {}));
  // A turn with reasoning keeps its block in the reply.
  std::vector<ChatMessage> r = m;
  r[1].content = "<think>Greeting.</think>Hello";
  EXPECT_EQ(split(qwen3().pieces(r, {}, {.enable_thinking = false})).first,
            "<think>\nGreeting.\n</think>\n\nHello<|im_end|>");
}

TEST(Qwen3Chat, GenerationPrompt) {
  const std::vector<ChatMessage> m = {{"user", "Hi"}};
  EXPECT_EQ(render_chat(qwen3(), m, {}, {.add_generation_prompt = true}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(qwen3(), m, {}, {.add_generation_prompt = true, .enable_thinking = false}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(Qwen3Chat, EarlierTurnsDropTheirReasoning) {
  std::vector<ChatMessage> m = {
      {"user", "a"}, {"assistant", "<think>x</think>A"}, {"user", "b"}, {"assistant", "B"}};
  EXPECT_EQ(render_chat(qwen3(), m, {}, {}),
            "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
            "<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            "B<|im_end|>\n");
}

TEST(Qwen3Chat, ToolCallArgumentsGivenAsAStringRenderAsGiven) {
  ChatMessage call{"assistant", ""};
  call.tool_calls = {{"f", R"({"a": 1})", R"({"a":1})"}, {"g", R"({"b": 2})"}};
  const std::string text = render_chat(qwen3(), {{"user", "go"}, call, {"tool", "r"}}, {}, {});
  EXPECT_NE(text.find("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":1}}\n</tool_call>\n"
                      "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"b\": 2}}\n</tool_call>"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace kiln
