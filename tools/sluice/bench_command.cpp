// sluice bench: the pipeline beside synchronous, staircase and triple-buffer
// code on the same data, each verified, with the bound and efficiency.
#include <cstdio>
#include <sstream>

#include "bench.hpp"
#include "commands.hpp"
#include "sluice/byte_size.hpp"
#include "sluice/device.hpp"
#include "trace_output.hpp"

namespace sluice::cli {

namespace {
std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) parts.push_back(part);
  return parts;
}
}  // namespace

Action add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "sluice's pipeline against hand-written stream code, with the bound");
  struct Args {
    bench::BenchOptions options;
    std::string workloads = "sincos20,sincos100,sincos200,vadd,copy";
    std::string sizes = "256MiB,1GiB";
    bool json = false;
    TraceOutput traces;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--device", args->options.device, "GPU ordinal")->capture_default_str();
  cmd->add_option("--workloads", args->workloads, "comma-separated: sincosN, vadd, copy")->capture_default_str();
  cmd->add_option("--sizes", args->sizes, "comma-separated bytes per array, e.g. 64MiB,4GiB")->capture_default_str();
  cmd->add_option("--repeat", args->options.repeats, "timed runs per row (median reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--chunk", args->options.pipeline.chunk_items, "items per chunk for the pipeline (0: default)");
  cmd->add_option("--depth", args->options.pipeline.depth, "device slots per span")->capture_default_str();
  cmd->add_option("--staging-threads", args->options.pipeline.staging_threads,
                  "host copy threads per direction (0: default)");
  cmd->add_flag("--json", args->json, "print JSON instead of a table");
  args->traces.add_options(*cmd);
  return [args] {
    if (Device::count() == 0) {
      std::fprintf(stderr, "sluice bench: no CUDA device: %s\n", Device::unavailable_reason().c_str());
      return 1;
    }
    args->traces.check_writable();
    bench::BenchOptions o = args->options;
    o.workloads.clear();
    o.sizes.clear();
    for (const auto& name : split(args->workloads)) o.workloads.push_back(bench::parse_workload(name));
    for (const auto& size : split(args->sizes)) o.sizes.push_back(parse_bytes(size));
    const auto result = bench::run_bench(o, [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); });
    std::fputs((args->json ? bench::bench_json(result) + "\n" : bench::bench_text(result)).c_str(), stdout);
    args->traces.write(result.traces);
    return 0;
  };
}

}  // namespace sluice::cli
