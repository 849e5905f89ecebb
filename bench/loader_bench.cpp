#include "loader_bench.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bound/host_rates.hpp"
#include "bound/link_rates.hpp"
#include "core/staging_pool.hpp"
#include "python_peer.hpp"
#include "sluice/bound/bound.hpp"
#include "sluice/loader/token_shard.hpp"
#include "sluice/pipeline/file_io.hpp"
#include "text_table.hpp"
#include "training_loop.hpp"

namespace sluice::bench {

namespace {

// Steps run at a step cost: up to 2 s of them, 20 to 2000 (torch_loader_peer.py counts the same).
std::size_t idle_steps(double step_ms) {
  return std::clamp<std::size_t>(static_cast<std::size_t>(2000 / step_ms), 20, 2000);
}

// The page cache's read rate for the shards, as the loader's threads read (pread, many threads).
double read_gbps(const std::string& pattern) {
  StagingPool pool;
  double bytes = 0;
  const auto begin = std::chrono::steady_clock::now();
  for (const auto& shard : open_shards({pattern})) {
    FileSource source(shard.path, 1);
    std::vector<std::byte> ring(std::size_t{64} << 20);
    const std::size_t piece = std::size_t{4} << 20;
    pool.run(source.item_count(), piece, [&](std::size_t offset, std::size_t length) {
      source.read({offset, offset + length}, {ring.data() + offset % ring.size() / piece * piece, length});
    });
    bytes += static_cast<double>(source.item_count());
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  return bytes / (ms * 1e6);
}

nlohmann::json torch_rows(const LoaderBenchOptions& o, const std::string& pattern, std::string& note) {
  std::string steps;
  for (double s : o.step_ms) steps += fmt::format("{}{}", steps.empty() ? "" : ",", s);
  return run_python_peer("PyTorch DataLoader peer",
                         fmt::format("{} {} --pattern '{}' --batch {} --seq {} --steps {} --step-ms {}", o.python,
                                     o.torch_peer, pattern, o.batch, o.seq, o.steps, steps),
                         note);
}

}  // namespace

std::string run_loader_bench(const LoaderBenchOptions& o, const std::function<void(const std::string&)>& progress) {
  const auto dir = std::filesystem::path(o.dir) / fmt::format("sluice-loader-bench-{}", getpid());
  const std::string pattern = workloads::make_token_shards(dir.string(), o.tokens, 8);
  const double batch_bytes = static_cast<double>(o.batch * (o.seq + 1) * 2);
  const double storage = read_gbps(pattern);
  const LinkRates link = link_rates(0);
  // The loader's bound per batch: reading it, and carrying it over the link.
  RunVolume volume;
  volume.read_bytes = volume.h2d_bytes = batch_bytes;
  EngineRates rates = with_link({}, link);
  rates.read_gbps = storage;
  const Bound per_batch = compute_bound(volume, rates);
  std::string out = fmt::format(
      "Loader: {} shards of uint16 tokens ({} tokens), batches of {} x {} tokens ({:.0f} KiB read a batch)\n"
      "storage (page cache) read {:.1f} GB/s, H2D {:.1f} GB/s: at best {:.3f} ms a batch ({}), {:.3g} tokens/s\n\n",
      8, o.tokens, o.batch, o.seq, batch_bytes / 1024, storage, link.h2d_gbps, per_batch.ms, per_batch.limiter,
      static_cast<double>(o.batch * o.seq) / (per_batch.ms / 1e3));

  std::string note;
  nlohmann::json torch;
  if (!o.torch_peer.empty()) torch = torch_rows(o, pattern, note);

  workloads::TrainingShape shape;
  shape.batch = o.batch;
  shape.seq = o.seq;
  shape.steps = o.steps;
  shape.step_ms = 0;
  tools::TextTable fastest({"loader (no step)", "batches/s", "tokens/s", "of bound", "CPU ms/batch", "verified"});
  auto add = [&](const std::string& name, double ms_per_batch, double tokens_per_s, double cpu, const std::string& verified) {
    fastest.add_row({name, fmt::format("{:.0f}", 1e3 / ms_per_batch), fmt::format("{:.3g}", tokens_per_s),
                     fmt::format("{:.3f}", per_batch.ms / ms_per_batch), fmt::format("{:.3f}", cpu), verified});
  };
  double best_sluice = 0;
  for (std::size_t ahead : {3u, 8u}) {
    const auto r = workloads::prefetch_loop(pattern, shape, ahead);
    if (progress) progress(fmt::format("loader {}: {:.3g} tokens/s", r.method, r.tokens_per_s));
    add(r.method, r.ms / static_cast<double>(r.steps), r.tokens_per_s, r.cpu_ms_per_batch, r.verified ? "yes" : "NO: " + r.detail);
    best_sluice = std::max(best_sluice, r.tokens_per_s);
  }
  const auto sync = workloads::synchronous_loop(pattern, shape);
  add(sync.method, sync.ms / static_cast<double>(sync.steps), sync.tokens_per_s, sync.cpu_ms_per_batch,
      sync.verified ? "yes" : "NO: " + sync.detail);
  double best_torch = 0;
  if (torch.contains("throughput"))
    for (const auto& row : torch["throughput"]) {
      add(fmt::format("PyTorch DataLoader, {}", row["method"].get<std::string>()), row["ms_per_batch"].get<double>(),
          row["tokens_per_s"].get<double>(), row["cpu_ms_per_batch"].get<double>(), row["verified"].get<bool>() ? "yes" : "NO");
      best_torch = std::max(best_torch, row["tokens_per_s"].get<double>());
    }
  out += fastest.render();
  if (best_torch > 0) out += fmt::format("sluice's best over PyTorch's best: {:.2f}x (target >= 2x)\n", best_sluice / best_torch);

  tools::TextTable idle({"step ms", "method", "per step ms", "GPU idle", "loader's measure", "verified"});
  for (double step : o.step_ms) {
    shape.step_ms = step;
    shape.steps = idle_steps(step);
    const double alone = workloads::steps_alone_ms(shape);
    // 3 ahead, the default, and 8: whether more batches in flight change the idle at short steps.
    const auto ahead = workloads::prefetch_loop(pattern, shape, 3, alone);
    const auto far_ahead = workloads::prefetch_loop(pattern, shape, 8, alone);
    const auto sync_step = workloads::synchronous_loop(pattern, shape, alone);
    if (progress)
      progress(fmt::format("step {} ms: sluice idle {:.2f}% (3 ahead), {:.2f}% (8 ahead), sync {:.2f}%", step,
                           100 * ahead.gpu_idle, 100 * far_ahead.gpu_idle, 100 * sync_step.gpu_idle));
    for (const auto& r : {ahead, far_ahead, sync_step})
      idle.add_row({fmt::format("{}", step), r.method, fmt::format("{:.3f}", r.ms / static_cast<double>(r.steps)),
                    fmt::format("{:.2f}%", 100 * r.gpu_idle),
                    r.loader_idle ? fmt::format("{:.2f}%", 100 * r.loader_idle->idle_fraction()) : "",
                    r.verified ? "yes" : "NO: " + r.detail});
    if (torch.contains("idle"))
      for (const auto& row : torch["idle"])
        if (row["step_ms"].get<double>() == step)
          idle.add_row({fmt::format("{}", step), fmt::format("PyTorch DataLoader, {}", row["method"].get<std::string>()),
                        fmt::format("{:.3f}", row["ms_per_step"].get<double>()),
                        fmt::format("{:.2f}%", 100 * row["gpu_idle"].get<double>()), "",
                        row["verified"].get<bool>() ? "yes" : "NO"});
  }
  out += '\n';
  out += idle.render();
  out += "\nGPU idle = 1 - (the same steps run back to back with no loading) / the loop's time, for every row; the loop's\n"
         "time includes loading the first batch. Each step cost runs up to 2 s of steps (20 to 2000), so that one fill\n"
         "weighs as it does in a training run rather than in 40 ms. The loader's measure is its own, from events (the\n"
         "step stream's waits for data, the first batch left out). Targets: GPU idle <= 1% wherever a batch's bound is\n"
         "below the step; sluice's best throughput >= 2x PyTorch's best.\n";
  if (!note.empty()) out += "note: " + note + "\n";
  std::filesystem::remove_all(dir);
  return out;
}

}  // namespace sluice::bench
