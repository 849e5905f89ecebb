// sluice::BatchPrefetcher, the public prefetcher for any batch, on a GPU:
// batches of a pageable and a page-locked piece, of sizes that change from
// batch to batch, reach the consumer's stream bitwise; the producer's fail()
// reaches next() at that batch; stopping early frees a producer waiting in
// put(); a kept batch keeps its bytes when its slot is refilled; a piece that
// a file also holds is read from the file. Each case runs under a watchdog,
// so a hang fails it instead of the suite.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../host/memory_file.hpp"
#include "../host/run_probes.hpp"
#include "core/splitmix64.hpp"
#include "gpu_test.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/loader/batch_prefetcher.hpp"

namespace sluice::test {

namespace {

constexpr auto limit = std::chrono::seconds(120);

// Batch b: a pageable piece and a page-locked one a third its size, every
// byte a hash of (batch, piece, index), so that a byte of another batch, of
// the other piece or at another offset shows. Sizes vary below and above
// the size the producer stages on its own thread, unless `fixed` is given.
struct Batches {
  std::vector<std::vector<std::byte>> pageable;
  std::vector<PinnedBuffer<std::byte>> pinned;
  explicit Batches(std::size_t count, std::size_t fixed = 0) {
    for (std::size_t b = 0; b < count; ++b) {
      const std::size_t n = fixed ? fixed : 1 + detail::splitmix64(b) % (std::size_t{3} << 20);
      pageable.emplace_back(n);
      pinned.emplace_back(n / 3 + 1);
      for (std::size_t i = 0; i < n; ++i) pageable.back()[i] = byte(b, 0, i);
      for (std::size_t i = 0; i < pinned.back().size(); ++i) pinned.back().data()[i] = byte(b, 1, i);
    }
  }
  static std::byte byte(std::size_t b, std::size_t piece, std::size_t i) {
    return static_cast<std::byte>(detail::splitmix64((b << 40) ^ (piece << 39) ^ i));
  }
  std::size_t count() const { return pageable.size(); }
  std::array<std::size_t, 2> lengths(std::size_t b) const { return {pageable[b].size(), pinned[b].size()}; }
  std::array<BatchPiece, 2> pieces(std::size_t b) const {
    return {BatchPiece{pageable[b].data(), pageable[b].size(), false},
            BatchPiece{pinned[b].data(), pinned[b].size(), true}};
  }
  // Whether a block copied back holds batch b's pieces at its offsets.
  bool matches(std::size_t b, const std::vector<std::byte>& block, const std::vector<std::size_t>& offsets) const {
    const std::size_t n = pageable[b].size(), m = pinned[b].size();
    return offsets.size() == 2 && offsets[0] + n <= block.size() && offsets[1] + m <= block.size() &&
           std::memcmp(block.data() + offsets[0], pageable[b].data(), n) == 0 &&
           std::memcmp(block.data() + offsets[1], pinned[b].data(), m) == 0;
  }
};

// The producer's thread, stopped and joined wherever a case leaves, so that
// a failed assertion never leaves it waiting in put().
struct Producer {
  BatchPrefetcher& p;
  std::thread thread;
  void join() {
    if (thread.joinable()) thread.join();
  }
  ~Producer() {
    p.stop();
    join();
  }
};

// Each piece's bytes back from the device at its offset; the padding between
// pieces is never written, so it is not read (initcheck would say so) but left zero.
std::vector<std::byte> to_host(const DeviceBatch& b, std::array<std::size_t, 2> lengths, const Stream& stream) {
  std::vector<std::byte> out(b.bytes);
  for (std::size_t k = 0; k < b.offsets.size() && k < lengths.size(); ++k) {
    const std::size_t n = std::min(lengths[k], b.bytes - std::min(b.offsets[k], b.bytes));
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(out.data() + b.offsets[k], static_cast<const std::byte*>(b.data) + b.offsets[k], n,
                                      cudaMemcpyDeviceToHost, stream.get()));
  }
  stream.synchronize();
  return out;
}

}  // namespace

class PublicBatchPrefetcher : public GpuTest {};

TEST_F(PublicBatchPrefetcher, EveryBatchReachesTheConsumersStreamBitwise) {
  const Batches batches(50);
  Stream consumer;
  within(limit, "50 batches", [&] {
    BatchPrefetcher p({.ahead = 2, .held = 2, .threads = 4});
    Producer producer{p, std::thread([&] {
                        for (std::size_t b = 0; b < batches.count(); ++b) p.put(batches.pieces(b));
                        p.close();
                      })};
    std::size_t taken = 0;
    while (auto b = p.next(consumer)) {
      EXPECT_EQ(b->position, taken);
      EXPECT_EQ(b->offsets.size(), 2u);
      for (std::size_t offset : b->offsets) EXPECT_EQ(offset % 256, 0u);
      EXPECT_TRUE(b->position < batches.count() && batches.matches(b->position, to_host(*b, batches.lengths(b->position), consumer), b->offsets))
          << "batch " << b->position;
      ++taken;
    }
    EXPECT_EQ(taken, batches.count());
  });
}

TEST_F(PublicBatchPrefetcher, TheProducersFailureIsThrownByNextAtThatBatch) {
  const Batches batches(5);
  Stream consumer;
  within(limit, "a failing producer", [&] {
    BatchPrefetcher p({.ahead = 2, .held = 1});
    Producer producer{p, std::thread([&] {
                        for (std::size_t b = 0; b < batches.count(); ++b) p.put(batches.pieces(b));
                        p.fail("the source broke");
                      })};
    for (std::size_t b = 0; b < batches.count(); ++b) {
      const auto taken = p.next(consumer);
      ASSERT_TRUE(taken);
      EXPECT_TRUE(batches.matches(b, to_host(*taken, batches.lengths(b), consumer), taken->offsets)) << "batch " << b;
    }
    try {
      (void)p.next(consumer);
      ADD_FAILURE() << "next() after the producer failed returned";
    } catch (const BatchError& e) {
      EXPECT_EQ(e.position(), batches.count());
      EXPECT_NE(std::string(e.what()).find("the source broke"), std::string::npos) << e.what();
    }
  });
}

TEST_F(PublicBatchPrefetcher, StoppingEarlyFreesAProducerWaitingInPut) {
  const Batches batches(50, 4096);
  Stream consumer;
  within(limit, "stopping early", [&] {
    BatchPrefetcher p({.ahead = 1, .held = 1});
    std::atomic<std::size_t> put{0};
    std::atomic<bool> refused{false};
    Producer producer{p, std::thread([&] {
                        try {
                          for (std::size_t b = 0; b < batches.count(); ++b, ++put) p.put(batches.pieces(b));
                          p.close();
                        } catch (const std::logic_error&) {
                          refused = true;
                        }
                      })};
    ASSERT_TRUE(p.next(consumer));
    // Long enough for the producer to reach its bound and wait there; the
    // case holds however far it got.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    p.stop();
    producer.join();
    EXPECT_TRUE(refused);
    EXPECT_LT(put.load(), batches.count());  // it was held back, `ahead` beyond the consumer
    EXPECT_THROW((void)p.next(consumer), std::logic_error);
    consumer.synchronize();
  });
}

TEST_F(PublicBatchPrefetcher, AKeptBatchKeepsItsBytesWhenItsSlotIsRefilled) {
  // One size for every batch: the slots keep their memory, so without keep()
  // batch 0's block is where batch 2 lands.
  const Batches batches(10, std::size_t{1} << 20);
  Stream consumer;
  within(limit, "a kept batch", [&] {
    DeviceBatch first;
    {
      BatchPrefetcher p({.ahead = 1, .held = 1});
      Producer producer{p, std::thread([&] {
                          for (std::size_t b = 0; b < batches.count(); ++b) p.put(batches.pieces(b));
                          p.close();
                        })};
      while (auto b = p.next(consumer)) {
        if (b->position == 0) {
          p.keep(0);
          first = std::move(*b);
        }
      }
    }
    ASSERT_TRUE(first.data);
    EXPECT_TRUE(batches.matches(0, to_host(first, batches.lengths(0), consumer), first.offsets));
    first = {};  // the block is freed in the consumer stream's order
    consumer.synchronize();
  });
}

// A pageable piece that a file also holds (another process's shared memory)
// reaches the device from the file: its pointer's bytes are wrong on purpose.
TEST_F(PublicBatchPrefetcher, APieceThatAFileHoldsIsReadFromTheFileNotThroughItsPointer) {
  const Batches batches(6);
  const MemoryFile file;
  ASSERT_GE(file.fd, 0);
  std::vector<std::uint64_t> at;
  std::vector<std::vector<std::byte>> decoy;
  std::uint64_t end = 7;  // the first piece lies past the file's start
  for (std::size_t b = 0; b < batches.count(); ++b) {
    const std::vector<std::byte>& bytes = batches.pageable[b];
    file.write(bytes, end);
    at.push_back(end);
    decoy.emplace_back(bytes.size(), std::byte{0xEE});
    end += bytes.size() + 5;
  }
  Stream consumer;
  within(limit, "batches read from a file", [&] {
    BatchPrefetcher p({.ahead = 2, .held = 2, .threads = 4});
    Producer producer{p, std::thread([&] {
                        for (std::size_t b = 0; b < batches.count(); ++b) {
                          std::array<BatchPiece, 2> pieces = batches.pieces(b);
                          pieces[0].data = decoy[b].data();
                          pieces[0].fd = file.fd;
                          pieces[0].fd_offset = at[b];
                          p.put(pieces);
                        }
                        p.close();
                      })};
    std::size_t taken = 0;
    while (auto b = p.next(consumer)) {
      EXPECT_TRUE(b->position < batches.count() &&
                  batches.matches(b->position, to_host(*b, batches.lengths(b->position), consumer), b->offsets))
          << "batch " << b->position;
      ++taken;
    }
    EXPECT_EQ(taken, batches.count());
  });
}

}  // namespace sluice::test
