// Kernel order on the host executor, where each compute stream is a thread
// of its own: kernels in chunk order are called one at a time, in order, on
// one stream; independent kernels take turns over their streams, each
// stream in chunk order, and two streams really run at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "host_backend.hpp"
#include "pipeline_test.hpp"

namespace sluice::test {

namespace {

struct OrderCase {
  const char* name;
  KernelOrder order;
  unsigned streams;  // 0: the default for the order
  std::size_t depth;
  unsigned jitter_us;
};
void PrintTo(const OrderCase& c, std::ostream* os) { *os << c.name; }

// Which thread computed each chunk, and how many computes ran at once.
struct ComputeLog {
  std::mutex mutex;
  std::vector<std::pair<std::size_t, std::thread::id>> calls;
  int at_once = 0, most_at_once = 0;
};

}  // namespace

class KernelOrderTest : public ::testing::TestWithParam<OrderCase> {};

TEST_P(KernelOrderTest, ComputesFollowTheKernelOrder) {
  const OrderCase& k = GetParam();
  HostBackend backend({.jitter_us = k.jitter_us, .seed = k.depth});
  {
    const std::size_t chunk = 1000, chunks = 60;
    const auto in = pattern(chunk * chunks);
    auto pin_in = backend.pinned<float>(in.size()), pin_out = backend.pinned<float>(in.size());
    std::copy(in.begin(), in.end(), pin_in.begin());
    std::fill(pin_out.begin(), pin_out.end(), std::nanf(""));
    PipelineOptions o;
    o.chunk_items = chunk;
    o.depth = k.depth;
    o.kernel_order = k.order;
    o.compute_streams = k.streams;
    const unsigned streams = compute_stream_count(o);
    Pipeline p = backend.pipeline(o);
    const auto x = p.input(pin_in.span());
    const auto y = p.output(pin_out.span());
    ComputeLog log;
    p.compute([&, x, y](const Chunk& c) {
      {
        std::lock_guard lock(log.mutex);
        log.calls.emplace_back(c.index, std::this_thread::get_id());
        log.most_at_once = std::max(log.most_at_once, ++log.at_once);
      }
      backend.late_affine(c, 50, c[x].data(), c[y].data(), 2, 1);
      std::lock_guard lock(log.mutex);
      --log.at_once;
    });
    p.run();
    EXPECT_TRUE(is_affine(in, pin_out.span()));
    ASSERT_EQ(log.calls.size(), chunks);
    EXPECT_LE(log.most_at_once, static_cast<int>(streams));
    // Chunk c on stream c % streams: one thread per stream, each in chunk order.
    std::map<std::size_t, std::thread::id> thread_of_stream;
    std::map<std::size_t, std::size_t> last_of_stream;
    for (const auto& [index, thread] : log.calls) {
      const std::size_t stream = index % streams;
      const auto [it, first] = thread_of_stream.emplace(stream, thread);
      EXPECT_EQ(it->second, thread) << "chunk " << index << " ran off its stream";
      if (!first) {
        EXPECT_GT(index, last_of_stream[stream]) << "chunk " << index << " out of order on its stream";
      }
      last_of_stream[stream] = index;
    }
    std::vector<std::thread::id> threads;
    for (const auto& [stream, thread] : thread_of_stream) threads.push_back(thread);
    std::sort(threads.begin(), threads.end());
    EXPECT_EQ(std::unique(threads.begin(), threads.end()) - threads.begin(), static_cast<std::ptrdiff_t>(streams))
        << "streams shared a thread";
    if (k.order == KernelOrder::in_chunk_order) {
      for (std::size_t i = 0; i < log.calls.size(); ++i) EXPECT_EQ(log.calls[i].first, i);
      EXPECT_EQ(log.most_at_once, 1);
    }
  }
  backend.expect_clean();
}

INSTANTIATE_TEST_SUITE_P(
    Host, KernelOrderTest,
    ::testing::Values(OrderCase{"in_chunk_order_depth1", KernelOrder::in_chunk_order, 0, 1, 0},
                      OrderCase{"in_chunk_order_depth4_jittered", KernelOrder::in_chunk_order, 0, 4, 40},
                      OrderCase{"in_chunk_order_depth8", KernelOrder::in_chunk_order, 1, 8, 0},
                      OrderCase{"independent_one_stream_depth2", KernelOrder::independent, 1, 2, 0},
                      OrderCase{"independent_two_streams_depth1", KernelOrder::independent, 0, 1, 0},
                      OrderCase{"independent_two_streams_depth3_jittered", KernelOrder::independent, 2, 3, 40},
                      OrderCase{"independent_three_streams_depth5_jittered", KernelOrder::independent, 3, 5, 40}),
    [](const ::testing::TestParamInfo<OrderCase>& param) { return std::string(param.param.name); });

// Two streams run at once: chunk 0's compute waits until chunk 1's has
// started, which only a second stream can give it. Kernels in chunk order
// never do (the wait gives up after 10 s and says so).
TEST(KernelOrder, IndependentKernelsRunOnTwoStreamsAtOnce) {
  HostBackend backend;
  for (const KernelOrder order : {KernelOrder::independent, KernelOrder::in_chunk_order}) {
    auto in = backend.pinned<float>(4000), out = backend.pinned<float>(4000);
    std::fill(in.begin(), in.end(), 1.0f);
    PipelineOptions o;
    o.chunk_items = 1000;
    o.depth = 2;
    o.kernel_order = order;
    Pipeline p = backend.pipeline(o);
    const auto x = p.input(in.span());
    const auto y = p.output(out.span());
    std::mutex mutex;
    std::condition_variable started;
    bool second_started = false, met = false;
    p.compute([&, x, y](const Chunk& c) {
      std::unique_lock lock(mutex);
      if (c.index == 1) {
        second_started = true;
        started.notify_all();
      }
      if (c.index == 0)
        met = started.wait_for(lock, std::chrono::seconds(order == KernelOrder::independent ? 10 : 0),
                               [&] { return second_started; });
      lock.unlock();
      backend.affine(c, c[x].data(), c[y].data(), 2, 1);
    });
    p.run();
    EXPECT_EQ(met, order == KernelOrder::independent)
        << (order == KernelOrder::independent ? "chunk 1's compute never started beside chunk 0's"
                                              : "kernels in chunk order ran at once");
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == 3.0f; }));
  }
  backend.expect_clean();
}

}  // namespace sluice::test
