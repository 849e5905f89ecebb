#include "training_loop.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/loader/batch_plan.hpp"
#include "sluice/loader/token_windows.hpp"
#include "sluice/trace/trace_recorder.hpp"
#include "stream_kernels.hpp"

namespace sluice::workloads {

namespace {

using Clock = std::chrono::steady_clock;

double cpu_ms() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3; };
  return ms(usage.ru_utime) + ms(usage.ru_stime);
}

// The tokens of one batch, read on the host as llm.c reads them: [rows][seq + 1] uint16.
class BatchReader {
 public:
  BatchReader(const std::string& pattern, const TrainingShape& shape)
      : windows_(open_shards({pattern}), shape.seq),
        plan_(windows_.count(), {shape.batch, shape.shuffle, shape.seed, 0, 1, false}) {
    for (const auto& s : windows_.shards()) fds_.push_back(::open(s.path.c_str(), O_RDONLY | O_CLOEXEC));
  }
  ~BatchReader() {
    for (int fd : fds_) ::close(fd);
  }
  const BatchPlan& plan() const { return plan_; }
  std::size_t seq() const { return windows_.seq(); }
  // Rows of the batch at `at`, into `out`; returns the rows.
  std::size_t read(LoaderState at, std::uint16_t* out) const {
    const std::size_t rows = plan_.batch_rows(at), bytes = (seq() + 1) * 2;
    for (std::size_t r = 0; r < rows; ++r) {
      const TokenWindow w = windows_.window(plan_.item(at, r));
      const auto offset = static_cast<off_t>(windows_.shards()[w.shard].data_offset() + w.first_token * 2);
      if (::pread(fds_[w.shard], out + r * (seq() + 1), bytes, offset) != static_cast<ssize_t>(bytes))
        throw ShardError(windows_.shards()[w.shard].path + ": short read at offset " + std::to_string(offset));
    }
    return rows;
  }
  // The checksum the step must see for the batch at `at`.
  unsigned long long checksum(LoaderState at) const {
    std::vector<std::uint16_t> raw(plan_.options().batch * (seq() + 1));
    const std::size_t rows = read(at, raw.data());
    std::vector<std::int32_t> in(rows * seq()), tg(rows * seq());
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t t = 0; t < seq(); ++t) {
        in[r * seq() + t] = raw[r * (seq() + 1) + t];
        tg[r * seq() + t] = raw[r * (seq() + 1) + t + 1];
      }
    return batch_checksum(in.data(), tg.data(), in.size());
  }

 private:
  TokenWindows windows_;
  BatchPlan plan_;
  std::vector<int> fds_;
};

// Checks every step's checksum, fills the figures both loops share.
void finish(LoopResult& r, const BatchReader& reader, const std::vector<LoaderState>& positions,
            const DeviceBuffer<unsigned long long>& sums, StreamView stream, double wall_ms, double cpu, double baseline_ms,
            std::size_t tokens) {
  std::vector<unsigned long long> got(positions.size());
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(got.data(), sums.data(), got.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                    stream.get()));
  stream.synchronize();
  r.verified = true;
  for (std::size_t s = 0; s < positions.size(); ++s)
    if (got[s] != reader.checksum(positions[s])) {
      r.verified = false;
      r.detail = "step " + std::to_string(s) + " saw tokens other than the file's at its planned windows";
      break;
    }
  r.steps = positions.size();
  r.ms = wall_ms;
  r.tokens_per_s = static_cast<double>(tokens) / (wall_ms / 1e3);
  r.gpu_idle = std::max(0.0, 1.0 - baseline_ms / wall_ms);
  r.cpu_ms_per_batch = cpu / static_cast<double>(r.steps);
  r.trace.wall_ms = wall_ms;
}

}  // namespace

std::string make_token_shards(const std::string& dir, std::size_t tokens, std::size_t shards) {
  std::filesystem::create_directories(dir);
  for (std::size_t s = 0; s < shards; ++s) {
    std::vector<std::uint32_t> values(tokens / shards);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::uint32_t>((s * 100'003 + i * 7 + 1) % 50'257);
    write_shard((std::filesystem::path(dir) / ("train_" + std::to_string(s) + ".bin")).string(), values, 2);
  }
  return (std::filesystem::path(dir) / "train_*.bin").string();
}

double steps_alone_ms(const TrainingShape& shape) {
  const std::size_t n = shape.batch * shape.seq;
  Stream stream;
  DeviceBuffer<std::int32_t> inputs(n, stream), targets(n, stream);
  DeviceBuffer<unsigned long long> sums(shape.steps, stream);
  SLUICE_CUDA_CHECK(cudaMemsetAsync(inputs.data(), 1, n * 4, stream.get()));
  SLUICE_CUDA_CHECK(cudaMemsetAsync(targets.data(), 2, n * 4, stream.get()));
  stream.synchronize();
  TraceRecorder recorder(stream);
  const auto begin = Clock::now();
  for (std::size_t s = 0; s < shape.steps; ++s)
    recorder.record(stream, Lane::compute, s, 0, 0, [&] {
      launch_training_step(stream, static_cast<std::uint64_t>(shape.step_ms * 1e6), inputs.data(), targets.data(), n,
                           sums.data() + s);
    });
  stream.synchronize();
  return std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
}

LoopResult synchronous_loop(const std::string& pattern, const TrainingShape& shape, double baseline_ms) {
  if (baseline_ms <= 0) baseline_ms = steps_alone_ms(shape);
  const BatchReader reader(pattern, shape);
  const std::size_t per_batch = shape.batch * shape.seq;
  Stream stream;
  std::vector<std::uint16_t> host(shape.batch * (shape.seq + 1));  // pageable, as a plain loop has it
  DeviceBuffer<std::uint16_t> raw(host.size(), stream);
  DeviceBuffer<std::int32_t> inputs(per_batch, stream), targets(per_batch, stream);
  DeviceBuffer<unsigned long long> sums(shape.steps, stream);
  SLUICE_CUDA_CHECK(cudaMemsetAsync(sums.data(), 0, shape.steps * sizeof(unsigned long long), stream.get()));
  stream.synchronize();
  LoopResult r;
  r.method = "synchronous: read, cudaMemcpy, step";
  TraceRecorder recorder(stream);
  std::vector<LoaderState> positions;
  LoaderState at;
  std::size_t tokens = 0;
  const double cpu_before = cpu_ms();
  const auto begin = Clock::now();
  for (std::size_t s = 0; s < shape.steps; ++s, at = reader.plan().next(at)) {
    const std::size_t rows = reader.read(at, host.data());
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(raw.data(), host.data(), rows * (shape.seq + 1) * 2, cudaMemcpyHostToDevice, stream.get()));
    launch_widen(stream, raw.data(), 2, inputs.data(), targets.data(), rows, shape.seq);
    recorder.record(stream, Lane::compute, s, 0, 0, [&] {
      launch_training_step(stream, static_cast<std::uint64_t>(shape.step_ms * 1e6), inputs.data(), targets.data(),
                           rows * shape.seq, sums.data() + s);
    });
    stream.synchronize();  // the buffer is reused for the next batch
    positions.push_back(at);
    tokens += rows * shape.seq;
  }
  const double wall = std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
  finish(r, reader, positions, sums, stream, wall, cpu_ms() - cpu_before, baseline_ms, tokens);
  r.trace.title = r.method;
  r.trace.intervals = recorder.intervals();
  return r;
}

LoopResult prefetch_loop(const std::string& pattern, const TrainingShape& shape, std::size_t ahead, double baseline_ms) {
  if (baseline_ms <= 0) baseline_ms = steps_alone_ms(shape);
  const BatchReader reader(pattern, shape);
  LoaderOptions o;
  o.batch = shape.batch;
  o.shuffle = shape.shuffle;
  o.seed = shape.seed;
  o.ahead = ahead;
  Stream stream;
  DeviceBuffer<unsigned long long> sums(shape.steps, stream);
  SLUICE_CUDA_CHECK(cudaMemsetAsync(sums.data(), 0, shape.steps * sizeof(unsigned long long), stream.get()));
  stream.synchronize();
  LoopResult r;
  r.method = "sluice TokenLoader, " + std::to_string(ahead) + " ahead";
  std::vector<LoaderState> positions;
  std::size_t tokens = 0;
  TokenLoader loader({pattern}, shape.seq, o);  // set up before the loop, as a training script does
  TraceRecorder recorder(stream);
  const double cpu_before = cpu_ms();
  const auto begin = Clock::now();
  {
    for (std::size_t s = 0; s < shape.steps; ++s) {
      const TokenBatch b = loader.next(stream);
      recorder.record(stream, Lane::compute, s, 0, 0, [&] {
        launch_training_step(stream, static_cast<std::uint64_t>(shape.step_ms * 1e6), b.inputs.data(), b.targets.data(),
                             b.inputs.size(), sums.data() + s);
      });
      positions.push_back(b.position);
      tokens += b.inputs.size();
    }
    stream.synchronize();
  }
  const double wall = std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
  r.loader_idle = loader.idle();  // reading the events back is no part of the loop
  finish(r, reader, positions, sums, stream, wall, cpu_ms() - cpu_before, baseline_ms, tokens);
  r.trace.title = r.method;
  r.trace.intervals = recorder.intervals();
  return r;
}

}  // namespace sluice::workloads
