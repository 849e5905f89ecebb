// The file cases of `sluice bench --files`: a file of floats streamed
// through a reduction, and through a transform into another file. Each as
// the pipeline with a file source (and sink), as a memory-mapped pageable
// input, and as the loop a user writes (read() into a buffer, cudaMemcpy).
// The storage read and write rates are measured in the same run and enter
// the bound.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "bench.hpp"
#include "bound/staging_rates.hpp"
#include "core/staging_pool.hpp"
#include "noise.hpp"
#include "sluice/core/byte_size.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/event_timer.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/pipeline/file_io.hpp"
#include "sluice/pipeline/pipeline.hpp"
#include "stream_kernels.hpp"
#include "targets.hpp"

namespace sluice::bench::detail {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t piece = std::size_t{4} << 20;
constexpr std::size_t loop_chunk = std::size_t{16} << 20;
constexpr std::size_t readme_chunk = std::size_t{16} << 20;  // the run(stream) row's chunks

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// A file the pool's threads read or write, closed however their work ends.
class OpenedFile {
 public:
  OpenedFile(const std::string& path, int flags, const char* purpose)
      : fd_(::open(path.c_str(), flags | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw IoError(path, 0, std::string("cannot open to ") + purpose + ": " + std::strerror(errno));
  }
  ~OpenedFile() { ::close(fd_); }
  OpenedFile(const OpenedFile&) = delete;
  OpenedFile& operator=(const OpenedFile&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Integer values: sums in double are exact, so the reduction verifies exactly.
float value_at(std::size_t i) { return static_cast<float>((i * 7919) % 1000); }

// Writes the file with the pool's threads; returns the exact sum of its values.
double create_file(const std::string& path, std::size_t items, StagingPool& pool) {
  const OpenedFile file(path, O_WRONLY | O_CREAT | O_TRUNC, "create");
  const int fd = file.fd();
  std::atomic<std::uint64_t> sum{0};
  pool.run(items * sizeof(float), piece, [&](std::size_t offset, std::size_t length) {
    std::vector<float> block(length / sizeof(float));
    std::uint64_t local = 0;
    for (std::size_t k = 0; k < block.size(); ++k) {
      block[k] = value_at(offset / sizeof(float) + k);
      local += static_cast<std::uint64_t>(block[k]);
    }
    if (::pwrite(fd, block.data(), length, static_cast<off_t>(offset)) != static_cast<ssize_t>(length))
      throw IoError(path, offset, std::string("write failed: ") + std::strerror(errno));
    sum += local;
  });
  return static_cast<double>(sum.load());
}

// The storage rate of a file system, as the pool's threads read or write with
// pread/pwrite. A write goes over the file as it is, without truncating it,
// as the file sink writes: a second write then reuses the blocks of the first.
double storage_gbps(const std::string& path, std::size_t bytes, bool write, StagingPool& pool) {
  const OpenedFile file(path, write ? O_WRONLY | O_CREAT : O_RDONLY, "measure storage");
  const int fd = file.fd();
  const std::size_t ring = std::size_t{64} << 20;
  PinnedBuffer<char> buffer(ring);
  std::memset(buffer.data(), 1, ring);
  const auto begin = Clock::now();
  pool.run(bytes, piece, [&](std::size_t offset, std::size_t length) {
    char* at = buffer.data() + offset % ring;
    const ssize_t done = write ? ::pwrite(fd, at, length, static_cast<off_t>(offset))
                               : ::pread(fd, at, length, static_cast<off_t>(offset));
    if (done != static_cast<ssize_t>(length)) throw IoError(path, offset, "short transfer while measuring storage");
  });
  return gb_per_s(static_cast<double>(bytes), ms_since(begin));
}

// Fills the output file, at its full size, with NaN: whatever a run does not
// write over fails the check.
void poison_file(const std::string& path, std::size_t bytes, StagingPool& pool) {
  const OpenedFile file(path, O_WRONLY | O_CREAT, "poison");
  if (::ftruncate(file.fd(), static_cast<off_t>(bytes)) != 0)
    throw IoError(path, 0, std::string("cannot size to poison: ") + std::strerror(errno));
  const std::vector<char> nan_bytes(piece, static_cast<char>(0xFF));
  pool.run(bytes, piece, [&](std::size_t offset, std::size_t length) {
    if (::pwrite(file.fd(), nan_bytes.data(), length, static_cast<off_t>(offset)) != static_cast<ssize_t>(length))
      throw IoError(path, offset, std::string("poison write failed: ") + std::strerror(errno));
  });
}

// Every output element is 2x + 1 of its input (exact for these integer values).
std::string check_transform(const std::string& out_path, std::size_t items, StagingPool& pool) {
  const int fd = ::open(out_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "the output file is missing";
  struct stat st {};
  fstat(fd, &st);
  if (static_cast<std::size_t>(st.st_size) != items * sizeof(float)) {
    ::close(fd);
    return fmt::format("the output file is {} bytes, expected {}", st.st_size, items * sizeof(float));
  }
  std::atomic<std::size_t> first_bad{SIZE_MAX};
  pool.run(items * sizeof(float), piece, [&](std::size_t offset, std::size_t length) {
    std::vector<float> block(length / sizeof(float));
    if (::pread(fd, block.data(), length, static_cast<off_t>(offset)) != static_cast<ssize_t>(length)) {
      first_bad = std::min<std::size_t>(first_bad, offset / sizeof(float));
      return;
    }
    for (std::size_t k = 0; k < block.size(); ++k)
      if (block[k] != value_at(offset / sizeof(float) + k) * 2.0f + 1.0f) {
        std::size_t bad = offset / sizeof(float) + k;
        for (std::size_t seen = first_bad; bad < seen && !first_bad.compare_exchange_weak(seen, bad);) {}
        return;
      }
  });
  ::close(fd);
  return first_bad == SIZE_MAX ? "" : fmt::format("element {} of the output file is wrong", first_bad.load());
}

// A read-only mapping of the whole file: the pageable input users reach for.
struct Mapping {
  Mapping(const std::string& path, std::size_t length) : bytes(length) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw IoError(path, 0, std::string("cannot open: ") + std::strerror(errno));
    data = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (data == MAP_FAILED) throw IoError(path, 0, std::string("cannot map: ") + std::strerror(errno));
  }
  ~Mapping() { ::munmap(data, bytes); }
  std::span<const float> floats() const { return {static_cast<const float*>(data), bytes / sizeof(float)}; }
  void* data = nullptr;
  std::size_t bytes;
};

}  // namespace

void run_file_cases(const BenchOptions& options, BenchResult& result,
                    const std::function<void(const std::string&)>& progress) {
  // The file cases run as the README writes them: kernels in chunk order, on
  // one compute stream. --compute-streams is for the workload rows.
  BenchOptions o = options;
  o.pipeline.compute_streams = 0;
  const std::size_t items = o.file_bytes / sizeof(float);
  const std::size_t bytes = items * sizeof(float);
  const std::string path = (std::filesystem::path(o.file_dir) / fmt::format("sluice-bench-{}.f32", getpid())).string();
  const std::string out_path = path + ".out";
  StagingPool pool(o.pipeline.staging_threads);
  const auto created = Clock::now();
  const double expected_sum = create_file(path, items, pool);
  if (progress) progress(fmt::format("files: wrote {} of floats to {} in {:.0f} ms", format_bytes(bytes), path, ms_since(created)));

  // Storage at its best, in this run: the file as it now is (in the page cache
  // after being written), and writes of the same size where the output goes
  // (a sink's runs after the first overwrite its blocks), each the best of
  // several tries: a short file is read or written in a few milliseconds,
  // where two tries left 256 MiB rows at 1.05-1.38 of their bound.
  EngineRates rates = with_host(with_link({}, refresh_link_rates(o.device)), fastest_of(result.host, result.host_idle_link));
  const int tries = static_cast<int>(std::clamp<std::size_t>((std::size_t{2} << 30) / std::max<std::size_t>(bytes, 1) + 1, 3, 8));
  for (int i = 0; i < tries; ++i) {
    rates.read_gbps = std::max(rates.read_gbps, storage_gbps(path, bytes, false, pool));
    rates.write_gbps = std::max(rates.write_gbps, storage_gbps(out_path, bytes, true, pool));
  }
  if (progress) progress(fmt::format("files: storage read {:.1f} GB/s, write {:.1f} GB/s", rates.read_gbps, rates.write_gbps));
  // The memory-mapped rows stage page-cache pages, which copy at their own
  // rate: staging from this mapping is measured too, and the faster counts.
  const Mapping map(path, bytes);
  EngineRates mapped_rates = rates;
  {
    const HostRegions mapped{static_cast<const std::byte*>(map.data), bytes, nullptr, 0};
    const HostCopyRates from_map =
        fastest_of(measure_staging_rates(o.device, pool, mapped), measure_host_copy_rates(pool, mapped));
    mapped_rates.stage_in_gbps = std::max(rates.stage_in_gbps, from_map.stage_in_gbps);
    if (progress) progress(fmt::format("files: staging from the mapped file {:.1f} GB/s", from_map.stage_in_gbps));
  }

  // The kernels alone, over device data (their time does not depend on the values).
  Stream stream;
  const std::size_t resident = std::min(items, (std::size_t{256} << 20) / sizeof(float));
  DeviceBuffer<float> x(resident, stream), y(resident, stream);
  DeviceBuffer<double> total(1, stream);
  SLUICE_CUDA_CHECK(cudaMemsetAsync(x.data(), 0, resident * sizeof(float), stream.get()));
  auto over_all = [&](auto&& launch) {
    const auto s = time_with_events(stream, 1, 3, [&](StreamView) {
      for (std::size_t at = 0; at < items; at += resident) launch(std::min(resident, items - at));
    });
    return *std::min_element(s.begin(), s.end());
  };
  const double sum_ms = over_all([&](std::size_t n) { workloads::launch_sum(stream, x.data(), n, total.data()); });
  const double affine_ms = over_all([&](std::size_t n) { workloads::launch_affine(stream, x.data(), y.data(), n, 2, 1); });

  auto time_runs = [&](const std::string& workload, const std::string& method, const std::string& memory,
                       const std::function<void()>& poison, const std::function<void()>& run,
                       const std::function<std::string()>& check, const std::function<void()>& after = {}) {
    std::vector<double> samples;
    std::string failure;
    for (int i = -1, rounds = rounds_for(bytes, o.repeats); i < rounds; ++i) {
      poison();
      const auto begin = Clock::now();
      run();
      SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
      if (i >= 0) samples.push_back(ms_since(begin));
      if (const std::string bad = check(); !bad.empty() && failure.empty()) failure = bad;
      if (after) after();
    }
    MeasuredRow row;
    row.workload = workload;
    row.bytes = bytes;
    row.method = method;
    row.kind = method.rfind("sluice", 0) == 0 ? RowKind::sluice : RowKind::hand_written;
    row.memory = memory;
    row.ms = summarize(samples);
    row.samples = samples;
    row.gbps = gb_per_s(static_cast<double>(bytes), row.ms.median);
    row.verified = failure.empty();
    row.detail = failure;
    if (progress)
      progress(fmt::format("{} {}: {:.2f} ms (IQR {:.1f}%), {}", workload, method, row.ms.median,
                           100 * spread_of(row.samples).relative, row.verified ? "verified" : "NOT VERIFIED: " + failure));
    return row;
  };
  // Each row's bound and efficiency are set by settle_bounds, once every case has run.
  auto finish_case = [&](BenchCase c, std::vector<MeasuredRow> rows) {
    result.rows.insert(result.rows.end(), rows.begin(), rows.end());
    result.cases.push_back(std::move(c));
  };
  std::vector<char> buffer(loop_chunk);
  DeviceBuffer<float> loop_in(loop_chunk / sizeof(float), stream), loop_out(loop_chunk / sizeof(float), stream);
  stream.synchronize();

  {  // Reduction: the file summed on the GPU, nothing copied back.
    const std::string name = "file sum";
    BenchCase c{name, bytes, {}, true, {}};
    c.bound.kernel_ms = sum_ms;
    RunVolume v;
    v.read_bytes = v.h2d_bytes = static_cast<double>(bytes);
    v.kernel_ms = sum_ms;
    c.bound.pinned_volume = v;
    v.staged_in_bytes = v.read_bytes;
    c.bound.staged_volume = v;
    c.bound.recompute(mapped_rates);
    double host_total = 0;
    auto poison = [&] {
      SLUICE_CUDA_CHECK(cudaMemsetAsync(total.data(), 0xFF, sizeof(double), stream.get()));  // NaN
      host_total = -1;
    };
    auto zero_then = [&] { SLUICE_CUDA_CHECK(cudaMemsetAsync(total.data(), 0, sizeof(double), stream.get())); };
    auto fetch = [&] {
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(&host_total, total.data(), sizeof(double), cudaMemcpyDeviceToHost, stream.get()));
      stream.synchronize();
    };
    auto check = [&]() -> std::string {
      return host_total == expected_sum ? "" : fmt::format("sum {} expected {}", host_total, expected_sum);
    };
    std::vector<MeasuredRow> rows;
    {
      Pipeline p(o.pipeline);
      const auto in = p.input(from_file<float>(path));
      double* t = total.data();
      p.compute([in, t](const Chunk& chunk) { workloads::launch_sum(chunk.stream, chunk[in].data(), chunk.size(), t); });
      rows.push_back(time_runs(name, "sluice, file source", "file", poison, [&] {
        zero_then();
        p.run(stream);  // the zeroing before, the read-back after, no device-wide synchronisation
        fetch();
      }, check));
    }
    {
      // As a newcomer writes it from the README: a pipeline with a chunk
      // size, the file as its input, a kernel per chunk, run(stream) on the
      // stream that holds the total; nothing else set.
      PipelineOptions readme_options;
      readme_options.chunk_items = readme_chunk / sizeof(float);
      Pipeline p(readme_options);
      const auto in = p.input(from_file<float>(path));
      double* t = total.data();
      p.compute([in, t](const Chunk& chunk) { workloads::launch_sum(chunk.stream, chunk[in].data(), chunk.size(), t); });
      rows.push_back(time_runs(name, row_names::file_reduction_run_stream, "file", poison, [&] {
        zero_then();
        p.run(stream);
        fetch();
      }, check));
    }
    {
      PipelineOptions staged = o.pipeline;
      staged.host_memory = HostMemoryPolicy::stage;
      Pipeline p(staged);
      const auto in = p.input(map.floats());
      double* t = total.data();
      p.compute([in, t](const Chunk& chunk) { workloads::launch_sum(chunk.stream, chunk[in].data(), chunk.size(), t); });
      rows.push_back(time_runs(name, "sluice, mmap'd file, staged", "pageable", poison, [&] {
        zero_then();
        p.run(stream);
        fetch();
      }, check));
    }
    rows.push_back(time_runs(name, "read() + cudaMemcpy loop", "pageable", poison, [&] {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      zero_then();
      for (std::size_t at = 0; at < bytes; at += loop_chunk) {
        const std::size_t n = std::min(loop_chunk, bytes - at);
        if (::pread(fd, buffer.data(), n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) break;
        SLUICE_CUDA_CHECK(cudaMemcpy(loop_in.data(), buffer.data(), n, cudaMemcpyHostToDevice));
        workloads::launch_sum(StreamView(cudaStreamLegacy), loop_in.data(), n / sizeof(float), total.data());
      }
      ::close(fd);
      SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
      fetch();
    }, check));
    finish_case(std::move(c), std::move(rows));
  }

  {  // Transform: y = 2x + 1 from the file into another file.
    const std::string name = "file affine";
    BenchCase c{name, bytes, {}, true, {}};
    c.bound.kernel_ms = affine_ms;
    RunVolume v;
    v.read_bytes = v.h2d_bytes = v.d2h_bytes = v.written_bytes = static_cast<double>(bytes);
    v.kernel_ms = affine_ms;
    c.bound.pinned_volume = v;
    v.staged_in_bytes = static_cast<double>(bytes);
    c.bound.staged_volume = v;
    c.bound.recompute(mapped_rates);
    // The output is poisoned in place, so the rows write over a file of the
    // right size, as the storage write rate was measured. One row writes a
    // new file instead: removed before each run, created by its sink, whose
    // blocks the file system must find as the run goes.
    auto poison = [&] { poison_file(out_path, bytes, pool); };
    auto remove_output = [&] { std::filesystem::remove(out_path); };
    auto check = [&] { return check_transform(out_path, items, pool); };
    // Storage writes vary with what the page cache holds (a write rate taken
    // only before the rows once left the mmap'd row at 1.08 of it): the
    // output's file is written over once more after every run, untimed, and
    // the fastest of all these writes is the bound's.
    auto measure_write = [&] { mapped_rates.write_gbps = std::max(mapped_rates.write_gbps, storage_gbps(out_path, bytes, true, pool)); };
    std::vector<MeasuredRow> rows;
    auto affine = [](auto in, auto out) {
      return [in, out](const Chunk& chunk) {
        workloads::launch_affine(chunk.stream, chunk[in].data(), chunk[out].data(), chunk.size(), 2, 1);
      };
    };
    // Built once, as a user's would be: pinned slots are not a run's cost.
    Pipeline from_files(o.pipeline);
    auto file_to_file = [&] {
      from_files.clear_spans();
      const auto in = from_files.input(from_file<float>(path));
      const auto out = from_files.output(to_file<float>(out_path, items));
      from_files.compute(affine(in, out));
      from_files.run();
    };
    rows.push_back(time_runs(name, "sluice, file source -> file sink", "file", poison, file_to_file, check, measure_write));
    rows.push_back(
        time_runs(name, "sluice, file source -> file sink, new file", "file", remove_output, file_to_file, check, measure_write));
    {
      PipelineOptions staged = o.pipeline;
      staged.host_memory = HostMemoryPolicy::stage;
      Pipeline p(staged);
      const auto in = p.input(map.floats());
      const auto out = p.output(to_file<float>(out_path, items));
      p.compute(affine(in, out));
      rows.push_back(time_runs(name, "sluice, mmap'd file -> file sink", "pageable", poison, [&] { p.run(); }, check, measure_write));
    }
    // Written over in place, as the sink writes (no O_TRUNC).
    rows.push_back(time_runs(name, "read() + cudaMemcpy + write() loop", "pageable", poison, [&] {
      const int in_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      for (std::size_t at = 0; at < bytes; at += loop_chunk) {
        const std::size_t n = std::min(loop_chunk, bytes - at);
        if (::pread(in_fd, buffer.data(), n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) break;
        SLUICE_CUDA_CHECK(cudaMemcpy(loop_in.data(), buffer.data(), n, cudaMemcpyHostToDevice));
        workloads::launch_affine(StreamView(cudaStreamLegacy), loop_in.data(), loop_out.data(), n / sizeof(float), 2, 1);
        SLUICE_CUDA_CHECK(cudaMemcpy(buffer.data(), loop_out.data(), n, cudaMemcpyDeviceToHost));
        if (::pwrite(out_fd, buffer.data(), n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) break;
      }
      ::close(in_fd);
      ::close(out_fd);
    }, check, measure_write));
    c.bound.recompute(mapped_rates);
    if (progress) progress(fmt::format("files: storage write at its best over the rows {:.1f} GB/s", mapped_rates.write_gbps));
    finish_case(std::move(c), std::move(rows));
  }
  std::filesystem::remove(out_path);
  if (!o.keep_file) std::filesystem::remove(path);
  else result.notes.push_back("kept " + path);
}

}  // namespace sluice::bench::detail
