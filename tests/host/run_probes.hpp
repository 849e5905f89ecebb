#pragma once
// What the fault and soak tests share: a watchdog that fails a case instead
// of hanging the suite, the process's threads and descriptors (for leak
// checks), items whose values say where they belong, and a source and a
// sink that record every call and fail on request. Host-only.
#include <dirent.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/splitmix64.hpp"
#include "sluice/pipeline/file_io.hpp"
#include "sluice/pipeline/source.hpp"

namespace sluice::test {

// Runs `body` on a thread of its own and waits at most `limit`. A body that
// does not return in time has hung: the process cannot go on with threads
// stuck inside the pipeline, so it says which case hung and aborts (CTest
// counts the test failed) rather than waiting forever. Exceptions and
// GoogleTest failures of the body reach the caller.
template <typename Body>
void within(std::chrono::seconds limit, const std::string& what, Body&& body) {
  std::packaged_task<void()> task(std::forward<Body>(body));
  std::future<void> done = task.get_future();
  std::thread runner(std::move(task));
  if (done.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "HUNG: %s did not finish within %lld s\n", what.c_str(), static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::abort();
  }
  runner.join();
  done.get();
}

// Entries of a /proc/self directory, not counting the descriptor that reads it.
inline std::size_t count_entries(const char* directory) {
  DIR* dir = opendir(directory);
  if (!dir) throw std::runtime_error(std::string("cannot open ") + directory);
  std::size_t n = 0;
  while (const dirent* entry = readdir(dir))
    if (entry->d_name[0] != '.') ++n;
  closedir(dir);
  return n;
}
inline std::size_t process_threads() { return count_entries("/proc/self/task"); }
inline std::size_t open_descriptors() { return count_entries("/proc/self/fd") - 1; }

// Threads end a moment after join() returns in some runtimes: wait briefly for
// the count to settle at `expected` before calling it a leak.
inline std::size_t settled_threads(std::size_t expected) {
  std::size_t now = process_threads();
  for (int i = 0; i < 200 && now != expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    now = process_threads();
  }
  return now;
}

// The count once threads that earlier tests ended have gone (unchanged for
// 20 ms): a baseline that a thread still exiting does not inflate.
inline std::size_t quiet_threads() {
  std::size_t last = process_threads();
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::size_t now = process_threads();
    if (now == last) return now;
    last = now;
  }
  return last;
}

// A different, reproducible value for every (seed, index).
inline std::uint64_t mix64(std::uint64_t x) { return detail::splitmix64(x); }
inline std::uint64_t item_value(std::uint64_t seed, std::size_t index) { return mix64(seed * 0x100000001b3ull + index); }

// What a source or sink is made to throw: its own type, so a test can see it
// come back nested in the pipeline's error.
struct ComponentFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Items f(i) for i in the range, in chunk order; throws at one item on request.
template <typename T, typename Fill>
class PatternSource final : public Source {
 public:
  PatternSource(std::size_t items, Fill fill, std::string name = "pattern source")
      : items_(items), fill_(std::move(fill)), name_(std::move(name)) {}
  std::size_t item_count() const override { return items_; }
  std::size_t item_bytes() const override { return sizeof(T); }
  std::string name() const override { return name_; }
  void begin_run() override {
    if (refuse_begin) throw ComponentFault(name_ + " refuses to begin");
  }
  void read(ItemRange range, std::span<std::byte> pinned) override {
    if (fail_at && range.begin <= *fail_at && *fail_at < range.end) {
      if (throw_io) throw IoError(name_, *fail_at * sizeof(T), "cannot read item " + std::to_string(*fail_at));
      throw ComponentFault(name_ + " cannot read item " + std::to_string(*fail_at));
    }
    T* out = reinterpret_cast<T*>(pinned.data());
    for (std::size_t i = range.begin; i < range.end; ++i) out[i - range.begin] = fill_(i);
    reads.fetch_add(1);
  }

  // Set between runs only.
  std::optional<std::size_t> fail_at;  // the read of the range holding this item throws
  bool throw_io = false;               // ...an IoError (the pipeline's file path) rather than a ComponentFault
  bool refuse_begin = false;
  std::atomic<std::size_t> reads{0};

 private:
  std::size_t items_;
  Fill fill_;
  std::string name_;
};

// Keeps what it is given: `pending` while a run writes, `committed` only
// once the run commits, as a file sink that replaces its file on success
// keeps the previous file. Records every call, for checks of order and of
// what was written after a failure.
template <typename T>
class RecordingSink final : public Sink {
 public:
  explicit RecordingSink(std::size_t items, std::string name = "recording sink")
      : items_(items), name_(std::move(name)), pending(items), committed(items) {}
  std::size_t item_count() const override { return items_; }
  std::size_t item_bytes() const override { return sizeof(T); }
  std::string name() const override { return name_; }
  void begin_run() override {
    std::lock_guard lock(mutex_);
    ++begun;
    if (refuse_begin) throw ComponentFault(name_ + " refuses to begin");
  }
  void write(ItemRange range, std::span<const std::byte> pinned) override {
    std::lock_guard lock(mutex_);
    if (fail_at && range.begin <= *fail_at && *fail_at < range.end) {
      failed_writes.push_back(range);
      throw ComponentFault(name_ + " cannot write item " + std::to_string(*fail_at));
    }
    std::memcpy(pending.data() + range.begin, pinned.data(), range.size() * sizeof(T));
    writes.push_back(range);
  }
  void commit() override {
    std::lock_guard lock(mutex_);
    if (refuse_commit) throw ComponentFault(name_ + " cannot commit");
    ++commits;
    committed = pending;
  }
  void abandon(std::size_t items_done) noexcept override {
    std::lock_guard lock(mutex_);
    abandons.push_back(items_done);
  }

  // Before a run: forget the last run's calls; `poison` fills the pending items.
  void reset(T poison) {
    std::lock_guard lock(mutex_);
    std::fill(pending.begin(), pending.end(), poison);
    writes.clear();
    failed_writes.clear();
    abandons.clear();
    begun = commits = 0;
  }

  // Set between runs only.
  std::optional<std::size_t> fail_at;
  bool refuse_begin = false;
  bool refuse_commit = false;
  // Read after a run only.
  std::size_t begun = 0, commits = 0;
  std::vector<ItemRange> writes, failed_writes;
  std::vector<std::size_t> abandons;

 private:
  std::size_t items_;
  std::string name_;
  std::mutex mutex_;

 public:
  std::vector<T> pending, committed;
};

// What a failed run left in an output: `prefix` chunks at its start hold
// right values and every chunk after them is untouched (the poison). A
// chunk half written or wrong, or a right one after an untouched one, is a
// `problem`: output written past where the run stopped, or corrupted.
struct WrittenChunks {
  std::size_t prefix = 0;
  std::string problem;
};
template <typename T, typename Expected>
WrittenChunks written_chunks(std::span<const T> out, const std::vector<ItemRange>& chunks, Expected expected, T poison) {
  WrittenChunks w;
  bool gap = false;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    bool right = true, untouched = true;
    for (std::size_t i = chunks[c].begin; i < chunks[c].end; ++i) {
      right = right && out[i] == expected(i);
      untouched = untouched && out[i] == poison;
    }
    if (!right && !untouched && w.problem.empty()) w.problem = "chunk " + std::to_string(c) + " is neither right nor untouched";
    if (right && gap && w.problem.empty()) w.problem = "chunk " + std::to_string(c) + " was written after an unwritten chunk";
    if (right && !gap) ++w.prefix;
    if (!right) gap = true;
  }
  return w;
}

// Writes in chunk order, each starting where the last ended, from item 0:
// what a sink must see. Returns where they end.
inline std::optional<std::size_t> contiguous_end(const std::vector<ItemRange>& writes) {
  std::size_t end = 0;
  for (const ItemRange& r : writes) {
    if (r.begin != end) return std::nullopt;
    end = r.end;
  }
  return end;
}

}  // namespace sluice::test
