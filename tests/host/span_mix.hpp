#pragma once
// Spans of every kind a pipeline takes, mixed: pinned, pageable (staged, or
// registered by the host-memory policy), registered by the caller, sources
// and sinks (called once a chunk in order, or split into pieces), and inout
// spans. MixedSpans adds one mix to a pipeline with a compute over all of
// them, poisons what the run must write, and checks every item afterwards,
// with what each source and sink was asked for. For the host executor's
// matrix of runs (test_pipeline_matrix.cpp).
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host_backend.hpp"
#include "sluice/pipeline/pipeline.hpp"

namespace sluice::test {

enum class SpanKind { pinned, pageable, registered, source, split_source, sink, split_sink };

struct Mix {
  std::string name;
  std::vector<SpanKind> inputs, outputs, inouts;
  HostMemoryPolicy policy = HostMemoryPolicy::stage;  // what pageable spans become
};
// The mixes the matrix runs: each kind of span in and out, and all at once.
std::vector<Mix> span_mixes();
inline void PrintTo(const Mix& mix, std::ostream* os) { *os << mix.name; }

class GeneratedSource;
class CollectingSink;

class MixedSpans {
 public:
  MixedSpans(const Mix& mix, HostBackend& backend, std::size_t items);
  ~MixedSpans();

  // Adds the spans to `p`, and a compute over them that records the chunks it sees.
  void add_to(Pipeline& p);
  // Before a run: outputs poisoned (NaN), inouts back to their first values, records cleared.
  void reset();

  // After a run: every output item right, every source item read once and
  // every sink item written once, unsplittable ones called in chunk order,
  // sinks committed.
  ::testing::AssertionResult all_right() const;
  // During a run (a chunk-done callable): the chunk's host outputs are right
  // and its sinks have its items.
  ::testing::AssertionResult chunk_right(ItemRange range) const;
  // What the compute saw: the chunks' item ranges, in the order it was called.
  std::vector<ItemRange> computed() const;
  // Computes that were running at once, at most (1 for kernels in chunk order).
  int most_computes_at_once() const { return most_at_once_; }

 private:
  struct HostSpan;
  ::testing::AssertionResult host_right(std::size_t from, std::size_t to) const;

  Mix mix_;
  std::size_t items_;
  std::vector<std::unique_ptr<HostSpan>> inputs_, outputs_, inouts_;
  std::vector<std::shared_ptr<GeneratedSource>> sources_;
  std::vector<std::shared_ptr<CollectingSink>> sinks_;
  mutable std::mutex mutex_;
  std::vector<ItemRange> computed_;
  int at_once_ = 0, most_at_once_ = 0;
};

}  // namespace sluice::test
