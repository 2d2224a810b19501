// The Jinja source of the Qwen2.5-Instruct chat template, for the tokenizer_config.json kiln
// writes when a base model has no chat template of its own.
#pragma once

#include <string_view>

namespace kiln {

// Qwen/Qwen2.5-*-Instruct tokenizer_config.json "chat_template", byte for byte (the same text as
// TEMPLATE in tools/qwen25_chat_template_ref.py, which renders the reference fixtures).
std::string_view qwen25_chat_template_jinja();

}  // namespace kiln
