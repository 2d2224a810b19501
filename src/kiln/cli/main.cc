// kiln: fine-tune Qwen2.5, Qwen3 and Llama 3 models. `kiln --help` lists the subcommands.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/cli/commands.h"
#include "kiln/kernels/device/host_cpu.h"

int main(int argc, char** argv) {
  // Run with the BLAS kernels this CPU supports when OpenBLAS fell back to generic ones (see
  // host_cpu.h); the variable is only read when the library loads, hence the re-exec.
  // It reads KILN_CPU_ISA, whose bad value is one error line like any other.
  try {
    if (const std::string core = kiln::blas_coretype_override(); !core.empty()) {
      ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
      ::execv("/proc/self/exe", argv);  // returns only on failure: carry on with the slow kernels
    }
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
    return 1;
  }
  kiln::init_logging();
  KILN_LOG_DEBUG("{}", kiln::blas_info());
  CLI::App app{"kiln: fine-tune Qwen2.5, Qwen3 and Llama 3 language models across many workers"};
  app.set_version_flag("--version", "kiln 0.1.0");
  app.require_subcommand(1);
  const std::vector<kiln::cli::Command> commands = {
      kiln::cli::add_init(app),     kiln::cli::add_train(app),
      kiln::cli::add_eval(app),     kiln::cli::add_export(app),
      kiln::cli::add_bench(app),    kiln::cli::add_doctor(app),
      kiln::cli::add_tokenize(app), kiln::cli::add_detokenize(app),
      kiln::cli::add_generate(app), kiln::cli::add_prepare_data(app),
      kiln::cli::add_plan(app),     kiln::cli::add_download(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const auto& c : commands) {
      if (c.app->parsed()) return c.run();
    }
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
