// sluice tune: the defaults against a measured sweep of chunk sizes, ramps
// and depths, and the gap between them.
#include <cstdio>
#include <sstream>

#include "commands.hpp"
#include "sluice/core/byte_size.hpp"
#include "sluice/core/device.hpp"
#include "tune.hpp"

namespace sluice::cli {

Action add_tune_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tune", "Sweep chunk sizes and depths; show where the defaults land");
  struct Args {
    bench::TuneOptions options;
    std::string workloads = "sincos100,vadd,copy";
    std::string sizes = "4MiB,32MiB,256MiB,1GiB";
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--device", args->options.device, "GPU ordinal")->capture_default_str();
  cmd->add_option("--workloads", args->workloads, "comma-separated: sincosN, vadd, copy")->capture_default_str();
  cmd->add_option("--sizes", args->sizes, "comma-separated bytes per array")->capture_default_str();
  cmd->add_option("--repeat", args->options.repeats, "timed runs per setting in the sweep")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--final-repeat", args->options.final_repeats,
                  "timed rounds of the final comparison at 256 MiB and above, up to 8x below (as `sluice bench --repeat`)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", args->json, "print JSON instead of tables");
  auto* pageable = cmd->add_flag("--pageable", args->options.pageable, "sweep with pageable (staged) arrays");
  cmd->add_flag("--replayed", args->options.replayed,
                "sweep replayed pipelines (a run captured as a CUDA graph, then launched as one); pinned arrays")
      ->excludes(pageable);
  return [args] {
    if (Device::count() == 0) {
      std::fprintf(stderr, "sluice tune: no CUDA device: %s\n", Device::unavailable_reason().c_str());
      return 1;
    }
    bench::TuneOptions o = args->options;
    std::stringstream w(args->workloads), s(args->sizes);
    for (std::string part; std::getline(w, part, ',');)
      if (!part.empty()) o.workloads.push_back(workloads::parse_workload(part));
    for (std::string part; std::getline(s, part, ',');)
      if (!part.empty()) o.sizes.push_back(parse_bytes(part));
    const auto cases = bench::run_tune(o, [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); });
    std::fputs((args->json ? bench::tune_json(cases) + "\n" : bench::tune_text(cases)).c_str(), stdout);
    return 0;
  };
}

}  // namespace sluice::cli
