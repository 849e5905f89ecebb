// sluice model: predicts a run's time and timeline from a saved probe, with
// no GPU: the rates and fixed costs come from `sluice probe --json`, the
// kernel's cost from the caller.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.hpp"
#include "probe_report.hpp"
#include "sluice/core/byte_size.hpp"
#include "sluice/measure/model.hpp"
#include "sluice/measure/tuner.hpp"
#include "sluice/pipeline/schedule.hpp"
#include "trace_output.hpp"

namespace sluice::cli {

Action add_model_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("model", "Predict a pipeline run from a saved probe (no GPU needed)");
  struct Args {
    std::string probe;
    std::string size = "1GiB";
    unsigned inputs = 1, outputs = 1;
    double kernel_ms = 0;
    bool pageable = false;
    bool schedule = false;
    std::string chunk, first;
    std::size_t depth = 4;
    TraceOutput traces;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--probe", args->probe, "a file written by `sluice probe --json`")->required();
  cmd->add_option("--size", args->size, "bytes per array")->capture_default_str();
  cmd->add_option("--inputs", args->inputs, "input arrays")->capture_default_str();
  cmd->add_option("--outputs", args->outputs, "output arrays")->capture_default_str();
  cmd->add_option("--kernel-ms", args->kernel_ms, "the kernel alone over all the data, ms")->capture_default_str();
  cmd->add_flag("--pageable", args->pageable, "the arrays are pageable and staged");
  cmd->add_option("--chunk", args->chunk, "largest chunk (default: the pipeline's default)");
  cmd->add_option("--first", args->first, "first chunk of the ramp (default: the pipeline's default)");
  cmd->add_option("--depth", args->depth, "device slots per span")->capture_default_str();
  cmd->add_flag("--schedule", args->schedule, "print the run's schedule: every chunk's operations, slots and edges");
  args->traces.add_options(*cmd);
  return [args] {
    std::ifstream file(args->probe);
    if (!file) throw std::runtime_error("cannot read " + args->probe);
    std::stringstream text;
    text << file.rdbuf();
    const ProbeResult probe = tools::probe_from_json(text.str());
    const std::size_t bytes = parse_bytes(args->size);
    constexpr std::size_t item_bytes = 4;
    const std::size_t items = bytes / item_bytes;
    ModelInput in;
    in.rates = tools::engine_rates_of(probe);
    in.fixed = tools::fixed_costs_of(probe);
    in.kernel.ms_per_item = items > 0 ? args->kernel_ms / static_cast<double>(items) : 0;
    in.spans = array_spans(args->inputs, args->outputs, item_bytes, args->pageable);
    in.items = items;
    PipelineOptions& options = in.options;
    if (!args->chunk.empty()) options.chunk_items = parse_bytes(args->chunk) / item_bytes;
    if (!args->first.empty()) options.first_chunk_items = parse_bytes(args->first) / item_bytes;
    options.depth = args->depth;
    const Schedule schedule = schedule_of(in);
    const Prediction p = predict(schedule, in.rates, in.fixed, in.kernel);
    RunVolume volume;
    volume.h2d_bytes = static_cast<double>(bytes) * args->inputs;
    volume.d2h_bytes = static_cast<double>(bytes) * args->outputs;
    if (args->pageable) {
      volume.staged_in_bytes = volume.h2d_bytes;
      volume.staged_out_bytes = volume.d2h_bytes;
    }
    volume.kernel_ms = args->kernel_ms;
    const Bound bound = compute_bound(volume, in.rates);
    const ModelChoice best = choose_with_model(in);
    std::printf("%s", fmt::format("{} x {} in, {} out, kernel {:.3f} ms, {}, on {} (from {})\n", format_bytes(bytes),
                                  args->inputs, args->outputs, args->kernel_ms, args->pageable ? "pageable" : "pinned",
                                  probe.device.name, args->probe)
                          .c_str());
    std::printf("%s", fmt::format("plan: {} chunks, largest {}, depth {}\n", schedule.chunk_count(),
                                  format_bytes(schedule.plan().chunk_items() * item_bytes), options.depth)
                          .c_str());
    if (args->schedule) std::printf("%s", explain(schedule).c_str());
    std::printf("%s", fmt::format("predicted: {:.3f} ms; bound {:.3f} ms ({}); predicted efficiency {:.3f}; busiest lane: {}\n",
                                  p.ms, bound.ms, bound.limiter, efficiency(bound.ms, p.ms), p.busiest)
                          .c_str());
    std::printf("%s", fmt::format("the model's best setting: {} chunks, ramp from {}, depth {}: {:.3f} ms\n",
                                  format_bytes(best.options.chunk_items * item_bytes),
                                  best.options.first_chunk_items > 0 ? format_bytes(best.options.first_chunk_items * item_bytes)
                                                                     : std::string("none"),
                                  best.options.depth, best.predicted_ms)
                          .c_str());
    args->traces.check_writable();
    args->traces.write({Trace{"model: " + format_bytes(bytes), p.timeline, p.ms, bound.ms}});
    return 0;
  };
}

}  // namespace sluice::cli
