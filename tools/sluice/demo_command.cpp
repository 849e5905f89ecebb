// sluice demo [NAME...]: every stream and event technique, on this GPU,
// measured and verified. With no name, all of them in order.
#include <algorithm>
#include <cstdio>

#include "commands.hpp"
#include "demo.hpp"
#include "sluice/core/byte_size.hpp"
#include "sluice/core/device.hpp"
#include "trace_output.hpp"

namespace sluice::cli {

Action add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Run the stream and event demos (all, or the ones named)");
  struct Args {
    std::vector<std::string> names;
    demo::DemoOptions options;
    std::string size;
    bool json = false;
    bool list = false;
    TraceOutput traces;
  };
  auto args = std::make_shared<Args>();
  std::vector<std::string> choices;
  for (const auto& d : demo::all_demos()) choices.push_back(d.name);
  cmd->add_option("name", args->names, "demos to run (default: all)")->check(CLI::IsMember(choices));
  cmd->add_option("--device", args->options.device, "GPU ordinal")->capture_default_str();
  cmd->add_option("--size", args->size, "data size per demo, e.g. 64MiB (default: each demo's own)");
  cmd->add_option("--repeat", args->options.repeats, "repeats (default: each demo's own)")->check(CLI::PositiveNumber);
  cmd->add_flag("--json", args->json, "print JSON instead of text");
  cmd->add_flag("--list", args->list, "list the demos and the question each answers");
  args->traces.add_options(*cmd);
  return [args] {
    if (args->list) {
      for (const auto& d : demo::all_demos()) std::printf("%-20s %s\n", d.name.c_str(), d.question.c_str());
      return 0;
    }
    if (Device::count() == 0) {
      std::fprintf(stderr, "sluice demo: no CUDA device, so no demo can run: %s\n", Device::unavailable_reason().c_str());
      return 1;
    }
    args->traces.check_writable();
    demo::DemoOptions o = args->options;
    if (!args->size.empty()) o.size = parse_bytes(args->size);
    Device(o.device).make_current();
    std::vector<demo::DemoResult> results;
    bool all_verified = true;
    for (const auto& d : demo::all_demos()) {
      if (!args->names.empty() && std::find(args->names.begin(), args->names.end(), d.name) == args->names.end())
        continue;
      results.push_back(d.run(o));
      all_verified &= results.back().verified || !results.back().skipped.empty();
      if (!args->json) std::printf("%s\n", demo::demo_text(results.back()).c_str());
      std::fflush(stdout);
    }
    if (args->json) std::printf("%s\n", demo::demos_json(results).c_str());
    std::vector<Trace> traces;
    for (const auto& r : results) traces.insert(traces.end(), r.traces.begin(), r.traces.end());
    args->traces.write(traces);
    if (!all_verified) std::fprintf(stderr, "sluice demo: a demo could not verify its result\n");
    return all_verified ? 0 : 3;
  };
}

}  // namespace sluice::cli
