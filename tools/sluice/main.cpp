// sluice: stream host data through a GPU at the speed of its slowest engine,
// and show what overlapped. Subcommands: probe, bench, demo, tune, model.
#include <cstdio>
#include <exception>
#include <map>

#include "commands.hpp"
#include "sluice/core/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"sluice: copy in, compute, copy out at the speed of the GPU's slowest engine"};
  app.require_subcommand(1);
  std::map<std::string, sluice::cli::Action> actions;
  actions["probe"] = sluice::cli::add_probe_command(app);
  actions["bench"] = sluice::cli::add_bench_command(app);
  actions["demo"] = sluice::cli::add_demo_command(app);
  actions["tune"] = sluice::cli::add_tune_command(app);
  actions["model"] = sluice::cli::add_model_command(app);
  CLI11_PARSE(app, argc, argv);
  try {
    for (auto* sub : app.get_subcommands()) return actions.at(sub->get_name())();
  } catch (const sluice::CudaError& e) {
    std::fprintf(stderr, "sluice: CUDA error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: %s\n", e.what());
    return 2;
  }
  return 0;
}
