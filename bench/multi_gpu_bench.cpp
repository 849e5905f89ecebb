#include "multi_gpu_bench.hpp"

#include <fmt/format.h>

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "sluice/core/byte_size.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/measure/stats.hpp"
#include "sluice/multigpu/multi_pipeline.hpp"
#include "text_table.hpp"
#include "workload.hpp"

namespace sluice::bench {

namespace {

using Clock = std::chrono::steady_clock;

// One GPU's side of a link test: for each direction a stream, a pinned host
// buffer and a device buffer.
struct LinkEnd {
  int device;
  Stream in_stream, out_stream;
  PinnedBuffer<std::byte> host_in, host_out;
  DeviceBuffer<std::byte> gpu_in, gpu_out;
};

enum class Direction { h2d, d2h, both };

std::vector<LinkEnd> make_ends(const std::vector<int>& devices, std::size_t bytes) {
  std::vector<LinkEnd> ends;
  ends.reserve(devices.size());
  for (int d : devices) {
    DeviceScope scope(d);
    Stream in, out;
    PinnedBuffer<std::byte> host_in(bytes), host_out(bytes);
    std::fill_n(host_in.data(), bytes, std::byte{1});
    std::fill_n(host_out.data(), bytes, std::byte{1});  // touched, so no first-use cost is timed
    DeviceBuffer<std::byte> gpu_in(bytes, in), gpu_out(bytes, out);
    SLUICE_CUDA_CHECK(cudaMemsetAsync(gpu_out.data(), 1, bytes, out.get()));
    ends.push_back({d, std::move(in), std::move(out), std::move(host_in), std::move(host_out), std::move(gpu_in),
                    std::move(gpu_out)});
  }
  return ends;
}

void free_ends(std::vector<LinkEnd>& ends) {
  for (auto& e : ends) {
    DeviceScope scope(e.device);
    e.in_stream.synchronize();
    e.out_stream.synchronize();
    e.gpu_in = {};
    e.gpu_out = {};
  }
}

void synchronize(std::vector<LinkEnd>& ends, const std::vector<std::size_t>& which) {
  for (auto k : which) {
    ends[k].in_stream.synchronize();
    ends[k].out_stream.synchronize();
  }
}

// GB/s of `rounds` copies on each GPU in `which`, all issued at once, best of
// three: the host clock from the first issue to the last GPU done.
double copy_rate(std::vector<LinkEnd>& ends, const std::vector<std::size_t>& which, Direction direction, int rounds) {
  const bool in = direction != Direction::d2h, out = direction != Direction::h2d;
  const std::size_t bytes = ends[0].gpu_in.bytes();
  double best = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    synchronize(ends, which);
    const auto begin = Clock::now();
    for (int r = 0; r < rounds; ++r)
      for (auto k : which) {
        auto& e = ends[k];
        DeviceScope scope(e.device);
        if (in)
          SLUICE_CUDA_CHECK(cudaMemcpyAsync(e.gpu_in.data(), e.host_in.data(), bytes, cudaMemcpyHostToDevice,
                                            e.in_stream.get()));
        if (out)
          SLUICE_CUDA_CHECK(cudaMemcpyAsync(e.host_out.data(), e.gpu_out.data(), bytes, cudaMemcpyDeviceToHost,
                                            e.out_stream.get()));
      }
    synchronize(ends, which);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
    const std::size_t copies = which.size() * (in && out ? 2 : 1);
    best = std::max(best, gb_per_s(static_cast<double>(bytes * copies) * rounds, ms));
  }
  return best;
}

struct Throughput {
  double ms = 0;
  bool verified = false;
  std::string detail;
  std::vector<std::size_t> items;  // per GPU, last run
};

Throughput run_multi(const std::vector<int>& devices, workloads::Problem& problem, int repeats) {
  // Pageable input is staged through pinned slots every run (not registered
  // after the first): the rows show what host memory allows.
  PipelineOptions options;
  options.host_memory = HostMemoryPolicy::stage;
  MultiPipeline p(devices, options);
  const auto& w = problem.workload();
  const auto a = p.input(problem.input(0));
  const auto b = w.input_count() > 1 ? p.input(problem.input(1)) : a;
  const auto y = p.output(problem.output());
  p.compute([w, a, b, y](const Chunk& c, std::size_t) {
    const float* inputs[2] = {c[a].data(), c[b].data()};
    w.launch(c.stream, inputs, c[y].data(), c.size());
  });
  Throughput t;
  p.run();  // warm-up; the next run deals items by this one's speed
  p.run();
  std::vector<double> ms;
  for (int k = 0; k < repeats; ++k) {
    problem.poison_output();
    const auto report = p.run();
    ms.push_back(report.wall_ms);
    t.items.clear();
    for (const auto& part : report.parts) t.items.push_back(part.items.size());
  }
  const auto v = problem.verify();
  t.ms = summarize(ms).median;
  t.verified = v.ok;
  t.detail = v.detail;
  return t;
}

std::string shares(const std::vector<std::size_t>& items) {
  const double total = static_cast<double>(std::accumulate(items.begin(), items.end(), std::size_t{0}));
  std::string out;
  for (auto n : items) out += fmt::format("{}{:.0f}%", out.empty() ? "" : "/", 100 * static_cast<double>(n) / total);
  return out;
}

}  // namespace

std::string run_multi_gpu_bench(const MultiGpuBenchOptions& o, const std::function<void(const std::string&)>& progress) {
  const int gpus = Device::count();
  if (gpus < 2) return fmt::format("multi-GPU bench: needs two GPUs or more; this machine has {}\n", gpus);
  std::vector<int> all(static_cast<std::size_t>(gpus));
  std::iota(all.begin(), all.end(), 0);
  std::string out = fmt::format("{} GPUs, {} per array\n\n", gpus, format_bytes(o.bytes));

  progress("links: each GPU alone, then all at once");
  {
    const std::size_t bytes = std::size_t{256} << 20;
    auto ends = make_ends(all, bytes);
    tools::TextTable links({"copy (pinned, 256 MiB x 4)", "GPU0 alone GB/s", "each alone (sum) GB/s",
                            "all at once GB/s", "at once / sum"});
    for (auto direction : {Direction::h2d, Direction::d2h, Direction::both}) {
      double sum = 0, first = 0;
      for (std::size_t k = 0; k < all.size(); ++k) {
        const double rate = copy_rate(ends, {k}, direction, 4);
        sum += rate;
        if (k == 0) first = rate;
      }
      std::vector<std::size_t> every(all.size());
      std::iota(every.begin(), every.end(), std::size_t{0});
      const double together = copy_rate(ends, every, direction, 4);
      links.add_row({direction == Direction::h2d ? "H2D" : direction == Direction::d2h ? "D2H" : "both directions", fmt::format("{:.1f}", first),
                     fmt::format("{:.1f}", sum), fmt::format("{:.1f}", together), fmt::format("{:.2f}", together / sum)});
    }
    free_ends(ends);
    out += links.render() + "\n";
  }

  tools::TextTable table({"workload", "memory", "GPU0 ms", "GB/s", "all GPUs ms", "GB/s", "speed-up", "shares",
                          "verified"});
  struct Case {
    const char* workload;
    workloads::Problem::Memory memory;
  };
  for (const Case c : {Case{"sincos200", workloads::Problem::Memory::pinned}, Case{"copy", workloads::Problem::Memory::pinned},
                       Case{"copy", workloads::Problem::Memory::pageable}}) {
    const bool pinned = c.memory == workloads::Problem::Memory::pinned;
    progress(fmt::format("{} {}: GPU 0, then all GPUs", c.workload, pinned ? "pinned" : "pageable"));
    workloads::Problem problem(workloads::parse_workload(c.workload), o.bytes / sizeof(float), c.memory);
    const auto one = run_multi({all[0]}, problem, o.repeats);
    const auto many = run_multi(all, problem, o.repeats);
    const double moved = problem.bytes_moved();
    table.add_row({c.workload, pinned ? "pinned" : "pageable (staged)", fmt::format("{:.2f}", one.ms),
                   fmt::format("{:.1f}", gb_per_s(moved, one.ms)), fmt::format("{:.2f}", many.ms),
                   fmt::format("{:.1f}", gb_per_s(moved, many.ms)), fmt::format("{:.2f}x", one.ms / many.ms),
                   shares(many.items),
                   one.verified && many.verified ? "yes" : "NO: " + (one.verified ? many.detail : one.detail)});
  }
  out += table.render();
  out += "speed-up: GPU 0 alone over all GPUs, the same MultiPipeline code; shares: items each GPU took in the last\n"
         "run, dealt by the previous run's speed. GB/s counts bytes in and out.\n";
  return out;
}

}  // namespace sluice::bench
