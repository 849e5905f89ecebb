#pragma once
// What the loader ring's tests share: a record file whose records say which
// record they are, a source that reads it as RecordLoader does (pread, a
// short read an IoError naming the file), and a consumer that reads each
// batch on the host executor's consumer lane, as a step's kernels would.
// Host-only.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "loader/loader_ring.hpp"
#include "ring_test.hpp"
#include "scratch_dir.hpp"
#include "sluice/core/io_error.hpp"

namespace sluice::test {

using detail::LoaderRing;
using detail::LoaderSource;

// Record r: its number in the first 8 bytes, then item_byte(r, k).
inline void write_record(std::size_t r, std::byte* row, std::size_t bytes) {
  const std::uint64_t id = r;
  std::memcpy(row, &id, sizeof id);
  for (std::size_t k = sizeof id; k < bytes; ++k) row[k] = item_byte(r, k);
}

class RecordFileFixture {
 public:
  RecordFileFixture(std::size_t records, std::size_t record_bytes) : record_bytes_(record_bytes) {
    path_ = (dir_ / "records.bin").string();
    std::vector<std::byte> all(records * record_bytes);
    for (std::size_t r = 0; r < records; ++r) write_record(r, all.data() + r * record_bytes, record_bytes);
    std::ofstream(path_, std::ios::binary).write(reinterpret_cast<const char*>(all.data()), static_cast<std::streamsize>(all.size()));
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  }
  ~RecordFileFixture() { ::close(fd_); }
  const std::string& path() const { return path_; }

  // Reads as RecordLoader does; a record in `failing` fails its read.
  LoaderSource source(std::set<std::size_t> failing = {}) {
    LoaderSource s;
    s.row_bytes = record_bytes_;
    s.read_row = [this, failing, reads = reads_](std::size_t item, std::byte* row) {
      ++*reads;
      const std::uint64_t offset = std::uint64_t{item} * record_bytes_;
      const auto done = ::pread(fd_, row, record_bytes_, static_cast<off_t>(offset));
      if (failing.count(item) || done != static_cast<ssize_t>(record_bytes_))
        throw IoError(path_, offset, "read of record " + std::to_string(item) + " ended early");
    };
    return s;
  }
  std::size_t reads() const { return *reads_; }

 private:
  ScratchDir dir_;
  std::string path_;
  std::size_t record_bytes_;
  int fd_ = -1;
  std::shared_ptr<std::atomic<std::size_t>> reads_ = std::make_shared<std::atomic<std::size_t>>(0);
};

// A batch as the consumer saw it: next()'s answer, and the records its lane found in the memory.
struct SeenBatch {
  LoaderState position;
  std::size_t rows = 0;
  bool last_of_epoch = false;
  std::vector<std::size_t> records;  // filled on the lane
  std::size_t wrong = 0;             // bytes not of the record they claim to be
};

// Batches the consumer took; each is completed on the lane, and read once the ring is gone (its lanes joined).
using Taken = std::vector<std::shared_ptr<SeenBatch>>;

// Takes `count` batches; the lane reads each before the next next() releases it.
inline void take_batches(LoaderRing& ring, HostRingExecutor& executor, std::size_t count, std::size_t record_bytes, Taken& taken) {
  for (std::size_t b = 0; b < count; ++b) {
    const auto t = ring.next();
    auto seen = std::make_shared<SeenBatch>(SeenBatch{t.position, t.rows, t.last_of_epoch, {}, 0});
    taken.push_back(seen);
    executor.on_consumer([t, record_bytes, seen] {
      for (std::size_t r = 0; r < t.rows; ++r) {
        const std::byte* row = t.data + r * record_bytes;
        std::uint64_t id = 0;
        std::memcpy(&id, row, sizeof id);
        seen->records.push_back(id);
        for (std::size_t k = sizeof id; k < record_bytes; ++k) seen->wrong += row[k] != item_byte(id, k);
      }
    });
  }
}

inline std::vector<SeenBatch> settled(const Taken& taken) {
  std::vector<SeenBatch> out;
  for (const auto& b : taken) out.push_back(*b);
  return out;
}

// What the batch plan says the batches from `start` hold.
inline std::vector<SeenBatch> planned(const BatchPlan& plan, LoaderState start, std::size_t count) {
  std::vector<SeenBatch> out;
  for (LoaderState at = plan.resume_at(start); out.size() < count; at = plan.next(at)) {
    SeenBatch b{at, plan.batch_rows(at), plan.last_of_epoch(at), {}, 0};
    for (std::size_t r = 0; r < b.rows; ++r) b.records.push_back(plan.item(at, r));
    out.push_back(b);
  }
  return out;
}

inline void expect_same_batches(const std::vector<SeenBatch>& seen, const std::vector<SeenBatch>& expected) {
  ASSERT_EQ(seen.size(), expected.size());
  for (std::size_t b = 0; b < seen.size(); ++b) {
    EXPECT_EQ(seen[b].position, expected[b].position) << "batch " << b;
    EXPECT_EQ(seen[b].rows, expected[b].rows) << "batch " << b;
    EXPECT_EQ(seen[b].last_of_epoch, expected[b].last_of_epoch) << "batch " << b;
    EXPECT_EQ(seen[b].records, expected[b].records) << "batch " << b;
    EXPECT_EQ(seen[b].wrong, 0u) << "batch " << b;
  }
}

inline LoaderOptions loader_options(std::size_t batch, bool shuffle, std::size_t ahead = 3) {
  LoaderOptions o;
  o.batch = batch;
  o.shuffle = shuffle;
  o.seed = 11;
  o.ahead = ahead;
  o.threads = 2;
  return o;
}

inline BatchPlan batch_plan(std::size_t items, const LoaderOptions& o) {
  return BatchPlan(items, {o.batch, o.shuffle, o.seed, o.rank, o.world, o.drop_last});
}

}  // namespace sluice::test
