// sluice bench: the pipeline beside synchronous, staircase, triple-buffer
// and PyTorch code on the same data, each verified, with the absolute bound,
// the efficiency and the model's prediction.
#include <cstdio>
#include <sstream>

#include "bench.hpp"
#include "commands.hpp"
#include "loader_bench.hpp"
#include "multi_gpu_bench.hpp"
#include "sluice/core/byte_size.hpp"
#include "sluice/core/device.hpp"
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
    std::string file_size;
    bool no_host_rows = false;
    bool json = false;
    bool loader = false;
    bool multi_gpu = false;
    bench::LoaderBenchOptions loader_options;
    TraceOutput traces;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--device", args->options.device, "GPU ordinal")->capture_default_str();
  cmd->add_option("--workloads", args->workloads, "comma-separated: sincosN, vadd, copy; empty for none")
      ->capture_default_str();
  cmd->add_option("--sizes", args->sizes, "comma-separated bytes per array, e.g. 64MiB,4GiB")->capture_default_str();
  cmd->add_option("--repeat", args->options.repeats, "timed rounds per row at 256 MiB and above, up to 8x as many below (median and IQR reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--chunk", args->options.pipeline.chunk_items, "items per chunk for the pipeline (0: default)");
  cmd->add_option("--depth", args->options.pipeline.depth, "device slots per span")->capture_default_str();
  cmd->add_option("--compute-streams", args->options.pipeline.compute_streams,
                  "compute streams the chunks take turns over in the workload rows (0: the default, two for their "
                  "independent kernels; the file rows keep one)");
  cmd->add_option("--staging-threads", args->options.pipeline.staging_threads, "host staging threads (0: one per core)");
  cmd->add_flag("--no-host-rows", args->no_host_rows, "leave out the pageable, registered and automatic rows");
  cmd->add_option("--torch-peer", args->options.torch_peer, "bench/torch_peer.py: add PyTorch's rows (needs torch)");
  cmd->add_option("--python", args->options.python, "the Python that runs --torch-peer")->capture_default_str();
  cmd->add_option("--files", args->file_size, "also stream a file of this size (e.g. 8GiB) through a reduction and a transform");
  cmd->add_option("--file-dir", args->options.file_dir, "where the file is made")->capture_default_str();
  cmd->add_flag("--keep-file", args->options.keep_file, "keep the file afterwards");
  cmd->add_flag("--json", args->json, "print JSON instead of a table");
  cmd->add_flag("--loader", args->loader,
                "instead: the training prefetcher against loading on demand and a PyTorch DataLoader");
  cmd->add_option("--loader-peer", args->loader_options.torch_peer, "bench/torch_loader_peer.py (needs torch)");
  cmd->add_option("--loader-tokens", args->loader_options.tokens, "tokens in the loader's shards")->capture_default_str();
  cmd->add_flag("--multi-gpu", args->multi_gpu,
                "instead: every GPU's link alone and together, and one pipeline over every GPU against GPU 0 alone");
  args->traces.add_options(*cmd);
  return [args] {
    if (Device::count() == 0) {
      std::fprintf(stderr, "sluice bench: no CUDA device: %s\n", Device::unavailable_reason().c_str());
      return 1;
    }
    if (args->loader) {
      bench::LoaderBenchOptions lo = args->loader_options;
      lo.dir = args->options.file_dir;
      lo.python = args->options.python;
      std::fputs(bench::run_loader_bench(lo, [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); }).c_str(),
                 stdout);
      return 0;
    }
    if (args->multi_gpu) {
      bench::MultiGpuBenchOptions mo;
      if (!args->sizes.empty() && args->sizes.find(',') == std::string::npos) mo.bytes = parse_bytes(args->sizes);
      mo.repeats = args->options.repeats;
      std::fputs(bench::run_multi_gpu_bench(mo, [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); }).c_str(),
                 stdout);
      return 0;
    }
    args->traces.check_writable();
    bench::BenchOptions o = args->options;
    o.workloads.clear();
    o.sizes.clear();
    for (const auto& name : split(args->workloads)) o.workloads.push_back(workloads::parse_workload(name));
    for (const auto& size : split(args->sizes)) o.sizes.push_back(parse_bytes(size));
    o.host_rows = !args->no_host_rows;
    if (!args->file_size.empty()) o.file_bytes = parse_bytes(args->file_size);
    const auto result = bench::run_bench(o, [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); });
    std::fputs((args->json ? bench::bench_json(result) + "\n" : bench::bench_text(result)).c_str(), stdout);
    args->traces.write(result.traces);
    return 0;
  };
}

}  // namespace sluice::cli
