#include "io/file_ranges.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/staging_pool.hpp"
#include "core/thread_name.hpp"
#include "io/file_calls.hpp"
#include "io/read_fully.hpp"
#include "ring/ring.hpp"
#include "sluice/core/io_error.hpp"

namespace sluice::ring {

namespace {

constexpr std::uint64_t page = 4096;

// Ranges closer than this in the file share a chunk (the bytes between are read too):
// a checkpoint's tensors lie end to end, and a chunk per small tensor would cost a
// ring position each.
constexpr std::uint64_t joinable_gap = std::uint64_t{64} << 10;

// Pages cached_fraction asks the kernel about, in runs of run_pages a call:
// a file's pages come into the page cache in runs (read-ahead), and a call a
// page, 1024 calls, cost a checkpoint load more than its tensors' allocation.
constexpr std::size_t sampled_pages = 1024;
constexpr std::size_t run_pages = 16;

// Lanes when the caller does not say: on a 16-core H100 host, 12 lanes read a
// cached checkpoint onto the GPU at 45-46 GB/s, 8 at 38, 14 at 38 and 16 at
// 32-35 (the lanes then compete with the threads that launch the GPU's work).
constexpr unsigned default_lanes = 12;

// One chunk: file bytes [start, start + read) into a staging slot, of which
// each piece's [skip, skip + bytes) goes to its `to` (a head before the first
// piece aligns the read for O_DIRECT).
struct Chunk {
  struct Piece {
    std::size_t skip = 0;
    std::size_t bytes = 0;
    std::byte* to = nullptr;
  };
  std::uint64_t start = 0;
  std::size_t read = 0;
  std::vector<Piece> pieces;
  std::uint64_t bytes() const {
    std::uint64_t n = 0;
    for (const Piece& p : pieces) n += p.bytes;
    return n;
  }
};

// The file, open for the reads, and its chunks; refuses what read_file_ranges refuses.
class ChunkedFile {
 public:
  ChunkedFile(const std::filesystem::path& path, std::span<const FileRange> ranges, const FileReadOptions& o)
      : name_(path.string()) {
    if (o.chunk_bytes < page || o.chunk_bytes % page != 0)
      throw std::invalid_argument(fmt::format("file read: chunk_bytes ({}) must be a positive multiple of 4096", o.chunk_bytes));
    if (o.staging == 0 || o.ahead == 0) throw std::invalid_argument("file read: staging and ahead must be at least 1");
    // The ring's device slots are ahead + 1 (it holds one chunk); a staging slot feeds one at a time.
    if (o.staging > o.ahead + 1)
      throw std::invalid_argument(fmt::format("file read: {} staging slots need ahead of at least {} (it is {})", o.staging,
                                              o.staging - 1, o.ahead));
    detail::DescriptorGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) throw IoError(name_, 0, "cannot open for reading: " + detail::errno_text(errno));
    opened_ = detail::identify(fd.get(), name_);
    // The ranges were planned from a header read earlier, by path: a file renamed over the path
    // since (a concurrent save, a checkpoint rotated by another job) or written since would give
    // its bytes at the old file's offsets.
    if (o.expected_file && !opened_.unchanged_since(*o.expected_file))
      throw replaced(*o.expected_file, opened_, "was replaced or changed after its header was read");
    const std::uint64_t size = opened_.size;
    for (const FileRange& r : ranges) {
      if (r.bytes > 0 && !r.to) throw std::invalid_argument("file read: a range has no memory to read into");
      if (r.offset > size || r.bytes > size - r.offset)
        throw IoError(name_, r.offset,
                      fmt::format("a range of {} bytes at offset {} runs past the file's end ({} bytes)", r.bytes, r.offset, size));
      cut(r, o.chunk_bytes);
    }
    if (o.direct) {
      // Opened by path again: it must be the file the first descriptor holds.
      detail::DescriptorGuard direct(detail::open_direct_at(AT_FDCWD, name_, O_RDONLY));
      if (direct.get() >= 0) {
        if (const auto other = detail::identify(direct.get(), name_); !other.same_file(opened_))
          throw replaced(o.expected_file.value_or(opened_), other,
                         o.expected_file ? "was replaced or changed after its header was read" : "was replaced while it was opened");
        direct_fd_ = direct.release();
      }
    }
    fd_ = fd.release();
  }
  ~ChunkedFile() {
    ::close(fd_);
    if (direct_fd_ >= 0) ::close(direct_fd_);
  }
  ChunkedFile(const ChunkedFile&) = delete;
  ChunkedFile& operator=(const ChunkedFile&) = delete;

  const std::vector<Chunk>& chunks() const { return chunks_; }
  bool direct() const { return direct_fd_ >= 0; }
  const std::string& name() const { return name_; }

  // The chunk's file bytes into `slot` (4096-aligned, for O_DIRECT), on the calling thread.
  void read(const Chunk& c, std::byte* slot) const { read_piece_at(c.start, slot, c.read); }

  // After the reads: a file written while it was read (another size or modification time than
  // when it was opened) left bytes of its old and new contents mixed in the caller's memory.
  void check_unchanged() const {
    if (const auto now = detail::identify(fd_, name_); !now.unchanged_since(opened_))
      throw replaced(opened_, now, "changed while it was being read (the bytes read may mix its old and new contents)");
  }

 private:
  IoError replaced(const detail::FileIdentity& then, const detail::FileIdentity& now, const std::string& what) const {
    return IoError(name_, 0, what + ": " + detail::what_changed(then, now));
  }

  // A range's bytes go into the last chunk while they fit its window and
  // follow it closely; else into new chunks from the page under them.
  void cut(const FileRange& r, std::size_t chunk_bytes) {
    for (std::uint64_t at = r.offset; at < r.offset + r.bytes;) {
      const bool joins = !chunks_.empty() && at >= chunks_.back().start + chunks_.back().read &&
                         at - (chunks_.back().start + chunks_.back().read) <= joinable_gap &&
                         at < chunks_.back().start + chunk_bytes;
      if (!joins) chunks_.push_back({at / page * page, 0, {}});
      Chunk& c = chunks_.back();
      const std::uint64_t stop = std::min<std::uint64_t>(r.offset + r.bytes, c.start + chunk_bytes);
      c.pieces.push_back({static_cast<std::size_t>(at - c.start), static_cast<std::size_t>(stop - at), r.to + (at - r.offset)});
      c.read = static_cast<std::size_t>(stop - c.start);
      at = stop;
    }
  }

  void read_piece_at(std::uint64_t offset, std::byte* at, std::size_t length) const {
    std::size_t done = 0;
    const std::size_t aligned = length / page * page;
    if (aligned > 0 && detail::direct_ok(direct_fd_, offset, aligned, at)) {
      const detail::ReadOutcome r = detail::read_fully(direct_fd_, at, aligned, offset);
      if (r.error != 0) throw IoError(name_, offset + r.done, "cannot read: " + detail::errno_text(r.error));
      done = r.done;  // short where the file ended: the cached read below says so
    }
    const detail::ReadOutcome r = detail::read_fully(fd_, at + done, length - done, offset + done);
    if (r.error != 0) throw IoError(name_, offset + done + r.done, "cannot read: " + detail::errno_text(r.error));
    if (done + r.done < length)
      throw IoError(name_, offset + done + r.done, "the file ends here, before the bytes its ranges name (was it cut while read?)");
  }

  std::string name_;
  detail::FileIdentity opened_;
  int fd_ = -1;
  int direct_fd_ = -1;
  std::vector<Chunk> chunks_;
};

}  // namespace

double cached_fraction(const std::filesystem::path& path, std::uint64_t offset, std::uint64_t bytes) {
  const std::string name = path.string();
  detail::DescriptorGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw IoError(name, 0, "cannot open for reading: " + detail::errno_text(errno));
  const std::uint64_t size = detail::file_size(fd.get(), name);
  if (offset > size || bytes > size - offset) throw IoError(name, offset, "the bytes asked about run past the file's end");
  if (bytes == 0) return 1.0;
  const std::uint64_t start = offset / page * page;
  const std::size_t length = static_cast<std::size_t>(offset + bytes - start);
  void* mapped = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd.get(), static_cast<off_t>(start));
  if (mapped == MAP_FAILED) return 0.0;  // cannot tell: as if not cached
  // A sample of runs of pages spread evenly, not every page: mincore over a
  // 4 GB checkpoint's million pages took 28 ms, a quarter of its load.
  const std::size_t pages = (length + page - 1) / page;
  const std::size_t run = pages <= sampled_pages ? pages : run_pages;
  const std::size_t runs = pages <= sampled_pages ? 1 : sampled_pages / run_pages;
  std::vector<unsigned char> resident(run);
  std::size_t in = 0;
  bool known = true;
  for (std::size_t k = 0; k < runs && known; ++k) {
    const std::size_t first = runs == 1 ? 0 : k * (pages - run) / (runs - 1);
    known = ::mincore(static_cast<std::byte*>(mapped) + first * page, run * page, resident.data()) == 0;
    for (unsigned char r : resident) in += r & 1;
  }
  ::munmap(mapped, length);
  if (!known) return 0.0;
  return static_cast<double>(in) / static_cast<double>(run * runs);
}

std::size_t file_read_lanes(const FileReadOptions& options, std::size_t chunks) {
  const std::size_t wanted = options.threads > 0 ? options.threads : std::min(default_lanes, StagingPool::default_thread_count());
  return std::max<std::size_t>(1, std::min(wanted, chunks));
}

namespace {

// What the lanes of one read share: the next chunk to read, which chunk failed first, and what was copied.
class LaneLedger {
 public:
  explicit LaneLedger(std::size_t chunks) : chunks_(chunks) {}
  bool stopping() const { return stopping_.load(std::memory_order_relaxed); }
  // The next chunk no lane has taken yet; the chunk count once all are taken. A lane that is
  // slowed (descheduled, its reads slower) takes fewer: no lane's share ends the read late.
  std::size_t next_chunk() { return std::min(next_.fetch_add(1, std::memory_order_relaxed), chunks_); }
  void copied(std::size_t chunks, std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    copied_chunks_ += chunks;
    copied_bytes_ += bytes;
  }
  // The lowest chunk that failed is the one reported; every lane stops.
  void failed(std::size_t chunk, std::exception_ptr error) {
    std::lock_guard lock(mutex_);
    if (!error_ || chunk < failed_at_) {
      failed_at_ = chunk;
      error_ = std::move(error);
    }
    stopping_ = true;
  }
  // Rethrows the failure, if any, with how far the read got.
  void rethrow(const ChunkedFile& file) const {
    if (!error_) return;
    const auto& chunks = file.chunks();
    const std::string context =
        failed_at_ < chunks_
            ? fmt::format("reading into device memory, chunk {} of {} (file bytes {}..{}); {} other chunks ({} bytes) were copied",
                          failed_at_, chunks_, chunks[failed_at_].start, chunks[failed_at_].start + chunks[failed_at_].read,
                          copied_chunks_, copied_bytes_)
            : fmt::format("reading into device memory, after all {} chunks were read", chunks_);
    try {
      std::rethrow_exception(error_);
    } catch (const IoError& io) {
      throw IoError(io, context);
    } catch (const std::exception& e) {
      throw std::runtime_error(file.name() + ": " + context + ": " + e.what());
    }
  }

 private:
  std::size_t chunks_;
  std::atomic<std::size_t> next_ = 0;
  std::atomic<bool> stopping_ = false;
  mutable std::mutex mutex_;
  std::size_t failed_at_ = SIZE_MAX;
  std::exception_ptr error_;
  std::size_t copied_chunks_ = 0;
  std::uint64_t copied_bytes_ = 0;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One lane: a thread with a ring of its own on an executor of its own (a copy
// stream of its own on a GPU) that takes the next chunk no lane has taken
// until none is left. Its thread is both ends: it takes what put() would wait
// for, reads each chunk into a staging slot while the copy lane carries the
// ones before, and ends once its last copy is done. No lane waits on another:
// their consumer's lanes are their own copy lanes, not one stream of the
// caller's (whose waits, in the order the lanes took their chunks, would tie
// each lane to the others).
LaneReport run_lane(const ChunkedFile& file, RingExecutor& executor, const FileReadOptions& options, LaneLedger& ledger,
                    Clock::time_point start) {
  const auto& chunks = file.chunks();
  RingOptions r;
  r.items = RingOptions::unbounded;
  r.ahead = options.ahead;
  r.held = 1;
  r.staging_slots = options.staging;
  r.slot_bytes = 0;  // the chunks go to the caller's memory, never to a device slot: the slots need none
  std::vector<std::size_t> mine;      // the chunks this lane put, by its ring's positions
  std::optional<std::size_t> reading;  // the chunk being put
  LaneReport report;
  std::size_t copied = 0;  // this lane's first `copied` chunks are on the device, each whole
  try {
    {
      Ring ring{RingPlan(r), executor, {.put_by_caller = true}};
      report.ring_made_seconds = seconds_since(start);
      // Nothing reads the chunks on a consumer's stream: the host waits for the last copy below.
      const ConsumerLane consumer = executor.copy_lane();
      while (!ledger.stopping()) {
        const std::size_t at = ledger.next_chunk();
        if (at == chunks.size()) break;
        reading = at;  // named if the take before its read fails
        if (mine.size() >= options.ahead) ring.take(consumer);
        const Chunk& c = chunks[at];
        Ring::Item item{.bytes = 0,
                        .fill =
                            [&](std::span<std::byte> slot) {
                              const Clock::time_point t = Clock::now();
                              if (report.started_seconds == 0) report.started_seconds = std::chrono::duration<double>(t - start).count();
                              file.read(c, slot.data());
                              report.reading_seconds += seconds_since(t);
                            },
                        .pieces = {}};
        for (const Chunk::Piece& p : c.pieces) item.pieces.push_back({nullptr, p.skip, p.bytes, p.to});
        const Clock::time_point t = Clock::now();
        ring.put(item);
        report.putting_seconds += seconds_since(t);
        mine.push_back(at);
        reading.reset();
      }
      ring.close();
      while (ring.take(consumer)) {
      }
      // The host waits for the lane's last copy; a copy the device failed shows here.
      if (!mine.empty()) executor.host_wait(ring.plan().op(mine.size() - 1, Step::ready).ref);
      if (const auto failed = executor.failure())
        throw RingError(failed->at.position, failed->at.position, failed->at.step, "a copy failed: " + failed->what);
    }
    copied = mine.size();
  } catch (...) {
    // The ring is stopped by now: its copies ran up to the first that failed. A copy that failed
    // on the copy lane shows later (at a take, at a stage waiting for its staging slot, or at the
    // end): where the executor says which (RingError's position, or failure(): the host
    // executor's; a CUDA stream's sticky error says not), that position is the one named, and
    // only the positions before it on this lane (which runs in order) were copied. Else the
    // chunk being put failed, or all were put.
    std::optional<std::size_t> copy_failed;
    try {
      throw;
    } catch (const RingError& e) {
      copy_failed = e.position();
    } catch (...) {
    }
    if (const auto lane_failure = executor.failure())
      copy_failed = std::min(copy_failed.value_or(SIZE_MAX), lane_failure->at.position);
    copied = mine.size();
    std::size_t chunk = reading.value_or(chunks.size());  // past the last: after the reads
    if (copy_failed && *copy_failed < mine.size()) {
      copied = *copy_failed;
      chunk = mine[*copy_failed];
    }
    ledger.failed(chunk, std::current_exception());
  }
  report.chunks = copied;
  for (std::size_t i = 0; i < copied; ++i) report.bytes += chunks[mine[i]].bytes();
  ledger.copied(report.chunks, report.bytes);
  report.finished_seconds = seconds_since(start);
  return report;
}

}  // namespace

FileReadReport read_file_ranges(const std::filesystem::path& path, std::span<const FileRange> ranges,
                                const MakeExecutor& make_executor, const FileReadOptions& options) {
  const ChunkedFile file(path, ranges, options);
  const auto& chunks = file.chunks();
  FileReadReport report{0, chunks.size(), file.direct(), {}};
  if (chunks.empty()) return report;
  const std::size_t lanes = file_read_lanes(options, chunks.size());
  std::vector<std::shared_ptr<RingExecutor>> executors;
  for (std::size_t k = 0; k < lanes; ++k) executors.push_back(make_executor(k));
  LaneLedger ledger(chunks.size());
  report.lanes.resize(lanes);
  const Clock::time_point start = Clock::now();
  {
    std::vector<std::jthread> threads;
    for (std::size_t k = 0; k < lanes; ++k)
      threads.emplace_back([&, k] {
        sluice::detail::name_this_thread("sluice-read");
        report.lanes[k] = run_lane(file, *executors[k], options, ledger, start);
      });
  }
  ledger.rethrow(file);
  file.check_unchanged();
  for (const Chunk& c : chunks) report.bytes += c.bytes();
  return report;
}

FileReadReport read_file_ranges_to_host(const std::filesystem::path& path, std::span<const FileRange> ranges,
                                       std::span<std::byte> buffer, const FileReadOptions& options, ReadInto into) {
  const ChunkedFile file(path, ranges, options);
  const auto& chunks = file.chunks();
  if (buffer.size() < options.chunk_bytes) throw std::invalid_argument("file read: the buffer is smaller than a chunk");
  if (into == ReadInto::chunk_place && buffer.size() / options.chunk_bytes < chunks.size())
    throw std::invalid_argument(fmt::format("file read: a buffer of {} bytes holds {} of the {} chunks of {} bytes",
                                            buffer.size(), buffer.size() / options.chunk_bytes, chunks.size(),
                                            options.chunk_bytes));
  FileReadReport report{0, chunks.size(), file.direct(), {}};
  // As read_file_ranges reads, with no copy: each lane into its own chunk of the buffer, or each chunk into its place.
  std::size_t lanes = file_read_lanes(options, chunks.size());
  if (into == ReadInto::lane_chunk) lanes = std::min(lanes, buffer.size() / options.chunk_bytes);
  std::mutex mutex;
  std::exception_ptr error;
  std::atomic<std::size_t> next = 0;  // the next chunk no lane has taken, as read_file_ranges deals them
  {
    std::vector<std::jthread> threads;
    for (std::size_t k = 0; k < lanes; ++k)
      threads.emplace_back([&, k] {
        sluice::detail::name_this_thread("sluice-read");
        try {
          for (std::size_t at; (at = next.fetch_add(1, std::memory_order_relaxed)) < chunks.size();)
            file.read(chunks[at], buffer.data() + (into == ReadInto::lane_chunk ? k : at) * options.chunk_bytes);
        } catch (...) {
          std::lock_guard lock(mutex);
          if (!error) error = std::current_exception();
        }
      });
  }
  if (error) std::rethrow_exception(error);
  file.check_unchanged();
  for (const Chunk& c : chunks) report.bytes += c.read;
  return report;
}

}  // namespace sluice::ring
