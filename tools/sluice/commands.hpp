#pragma once
// Each subcommand registers its options on the app and returns the action to
// run when it is chosen; the action returns the process exit code.
#include <CLI/CLI.hpp>

#include <functional>

namespace sluice::cli {

using Action = std::function<int()>;

Action add_probe_command(CLI::App& app);
Action add_bench_command(CLI::App& app);
Action add_demo_command(CLI::App& app);
Action add_tune_command(CLI::App& app);
Action add_model_command(CLI::App& app);


}  // namespace sluice::cli
