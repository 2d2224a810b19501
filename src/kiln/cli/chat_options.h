// The chat template options `kiln eval`, `kiln generate` and `kiln tokenize` share: --template and
// --enable-thinking, with one help text and one check each; --template alone for `kiln init` and
// `kiln export`, which write a directory's template.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace kiln::cli {

// Adds --template (into `chat_template`) and --enable-thinking (into `enable_thinking`, "true" or
// "false") to `sub`. `scope` begins each help text ("With --chat: "); `template_default` says
// what an unset --template means.
// Adds --template (into `chat_template`: one of chat_template_names()) with help text `help`
// (the choices are appended).
CLI::Option* add_template_option(CLI::App* sub, std::string& chat_template,
                                 const std::string& help);

void add_chat_template_options(CLI::App* sub, std::string& chat_template,
                               std::string& enable_thinking, const std::string& scope,
                               const std::string& template_default);

}  // namespace kiln::cli
