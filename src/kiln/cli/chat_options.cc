#include "kiln/cli/chat_options.h"

#include "kiln/text/chat_template.h"
#include "kiln/text/chat_template_choice.h"

namespace kiln::cli {

CLI::Option* add_template_option(CLI::App* sub, std::string& chat_template,
                                 const std::string& help) {
  return sub->add_option("--template", chat_template, help + ": " + chat_template_choices())
      ->check(CLI::IsMember(chat_template_names()));
}

void add_chat_template_options(CLI::App* sub, std::string& chat_template,
                               std::string& enable_thinking, const std::string& scope,
                               const std::string& template_default) {
  add_template_option(sub, chat_template,
                      scope + "the chat template (default: " + template_default + ")");
  sub->add_option("--enable-thinking", enable_thinking,
                  scope + "Qwen3's thinking switch, true or false (default: the template's)")
      ->check(CLI::IsMember({"true", "false"}));
}

}  // namespace kiln::cli
