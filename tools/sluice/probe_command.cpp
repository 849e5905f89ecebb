// sluice probe: capabilities, copy bandwidth by size and source, host copy
// scaling and fixed costs of this GPU.
#include <cstdio>

#include "commands.hpp"
#include "probe_report.hpp"
#include "sluice/core/byte_size.hpp"
#include "sluice/core/device.hpp"
#include "sluice/measure/probe.hpp"

namespace sluice::cli {

Action add_probe_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("probe", "Can this GPU overlap, and how fast can data move?");
  auto options = std::make_shared<ProbeOptions>();
  auto json = std::make_shared<bool>(false);
  auto min_size = std::make_shared<std::string>("64KiB");
  auto max_size = std::make_shared<std::string>("1GiB");
  cmd->add_option("--device", options->device, "GPU ordinal")->capture_default_str();
  cmd->add_option("--min-size", *min_size, "smallest copy (sizes grow 4x)")->capture_default_str();
  cmd->add_option("--max-size", *max_size, "largest copy")->capture_default_str();
  cmd->add_option("--repeat", options->repeats, "timed repeats per figure (0: by size)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", options->max_host_threads, "most host copy threads to try (0: all)");
  cmd->add_flag("--json", *json, "print JSON instead of tables");
  return [=] {
    if (Device::count() == 0) {
      std::fprintf(stderr, "sluice probe: no CUDA device: %s\n", Device::unavailable_reason().c_str());
      return 1;
    }
    ProbeOptions o = *options;
    o.min_bytes = parse_bytes(*min_size);
    o.max_bytes = parse_bytes(*max_size);
    const ProbeResult result = run_probe(o);
    std::fputs((*json ? tools::probe_json(result) + "\n" : tools::probe_text(result)).c_str(), stdout);
    return 0;
  };
}

}  // namespace sluice::cli
