// The multi-part pipeline: shares, global item numbers, results; on GPUs
// (a device may be named twice) or on host executors.
#include <mutex>
#include <set>
#include <vector>

#include "pipeline_test.hpp"

namespace sluice::test {

TEST_P(PipelineTest, MultiPipelineSplitsTheItemsAndGetsEveryOneRight) {
  const std::size_t n = 3'000'001;
  const auto in = pattern(n);
  std::vector<float> out(n, std::nanf(""));
  sluice::MultiPipeline p = backend().multi(3);
  const auto x = p.input(in);
  const auto y = p.output(out);
  std::mutex seen_mutex;  // the parts call back from their own threads
  std::set<std::size_t> seen_parts;
  p.compute([&, x, y](const sluice::Chunk& c, std::size_t part) {
    {
      std::lock_guard lock(seen_mutex);
      seen_parts.insert(part);
    }
    ASSERT_LE(c.items.end, n);  // global item numbers
    backend().affine(c, c[x].data(), c[y].data(), 2, 1);
  });
  for (int run = 0; run < 3; ++run) {  // the shares follow the measured speed from the second run
    std::fill(out.begin(), out.end(), std::nanf(""));
    const auto report = p.run();
    ASSERT_EQ(report.parts.size(), 3u);
    std::size_t next = 0;
    for (const auto& part : report.parts) {
      EXPECT_EQ(part.items.begin, next);
      next = part.items.end;
      if (part.items.size() > 0) {
        EXPECT_EQ(part.report.item_count, part.items.size());
      }
    }
    EXPECT_EQ(next, n);
    ASSERT_TRUE(is_affine(in, out)) << "run " << run;
  }
  EXPECT_EQ(seen_parts, (std::set<std::size_t>{0, 1, 2}));
  EXPECT_THROW(backend().multi(0), std::invalid_argument);
}

}  // namespace sluice::test
