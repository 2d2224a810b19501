// The kiln subcommands. Each registers itself on the CLI11 app and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace kiln::cli {

struct Command {
  CLI::App* app;             // the subcommand
  std::function<int()> run;  // its action, run when it was given; returns the exit code
};

Command add_init(CLI::App& app);
Command add_train(CLI::App& app);
Command add_eval(CLI::App& app);
Command add_export(CLI::App& app);
Command add_plan(CLI::App& app);
Command add_bench(CLI::App& app);
// `kiln bench comm`, registered under `kiln bench` (bench_comm.cc).
Command add_bench_comm(CLI::App& bench);
// `kiln bench dpo`, registered under `kiln bench` (bench_dpo.cc).
Command add_bench_dpo(CLI::App& bench);
Command add_doctor(CLI::App& app);
Command add_generate(CLI::App& app);
Command add_tokenize(CLI::App& app);
Command add_detokenize(CLI::App& app);
Command add_prepare_data(CLI::App& app);
Command add_download(CLI::App& app);

}  // namespace kiln::cli
