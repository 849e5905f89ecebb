// A training loop that never waits for data: batches from token shards on
// the GPU before the step asks, against loading each batch when it is needed.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

#include "demo.hpp"
#include "training_loop.hpp"

namespace sluice::demo {

DemoResult run_prefetch(const DemoOptions& o) {
  DemoResult r = make_result("prefetch", "can a training step start the moment the last one ends?",
                             {"method", "steps", "ms", "per step ms", "tokens/s", "GPU idle", "loader's idle", "CPU ms/batch",
                              "verified"});
  const std::size_t bytes = size_or(o, std::size_t{256} << 20);
  const auto dir = std::filesystem::temp_directory_path() / ("sluice-prefetch-demo-" + std::to_string(getpid()));
  const std::string pattern = workloads::make_token_shards(dir.string(), bytes / 2, 4);
  workloads::TrainingShape shape;
  shape.batch = 16;
  shape.seq = 1024;
  shape.steps = o.repeats > 0 ? static_cast<std::size_t>(o.repeats) * 20 : 60;
  shape.step_ms = 1.0;
  const double alone = workloads::steps_alone_ms(shape);
  std::vector<workloads::LoopResult> loops{workloads::synchronous_loop(pattern, shape, alone),
                                           workloads::prefetch_loop(pattern, shape, 3, alone),
                                           workloads::prefetch_loop(pattern, shape, 1, alone)};
  std::filesystem::remove_all(dir);
  r.verified = true;
  for (auto& loop : loops) {
    r.rows.push_back({loop.method, std::to_string(loop.steps), fixed(loop.ms, 1), fixed(loop.ms / static_cast<double>(loop.steps), 3),
                      fmt::format("{:.3g}", loop.tokens_per_s), fixed(100 * loop.gpu_idle, 1) + "%",
                      loop.loader_idle ? fixed(100 * loop.loader_idle->idle_fraction(), 2) + "%" : "",
                      fixed(loop.cpu_ms_per_batch, 3), loop.verified ? "yes" : "NO: " + loop.detail});
    r.verified &= loop.verified;
    r.traces.push_back(std::move(loop.trace));
  }
  const auto& sync = loops[0];
  const auto& ahead = loops[1];
  r.figures["sync per step ms"] = sync.ms / static_cast<double>(sync.steps);
  r.figures["prefetch per step ms"] = ahead.ms / static_cast<double>(ahead.steps);
  r.figures["prefetch GPU idle"] = ahead.gpu_idle;
  r.verification = "every step checksums its batch on the GPU; each checksum equals the file's tokens at the planned windows";
  r.figures["steps alone per step ms"] = alone / static_cast<double>(shape.steps);
  r.conclusion = fmt::format(
      "a {:.1f} ms step ({:.3f} ms with its launch, run alone) with {}x{} token batches: loading each batch when needed "
      "left the GPU idle {:.0f}% of the loop ({:.2f} ms a step); 3 batches ahead, {:.1f}% ({:.3f} ms a step; the loader "
      "measured the step's stream waiting {:.2f}% of the loop); 1 ahead, {:.1f}%",
      shape.step_ms, alone / static_cast<double>(shape.steps), shape.batch, shape.seq, 100 * sync.gpu_idle,
      sync.ms / static_cast<double>(sync.steps),
      100 * ahead.gpu_idle, ahead.ms / static_cast<double>(ahead.steps),
      ahead.loader_idle ? 100 * ahead.loader_idle->idle_fraction() : 0.0, 100 * loops[2].gpu_idle);
  return r;
}

}  // namespace sluice::demo
