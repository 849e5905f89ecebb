// A failure at every operation of a run, on every kind of span, at every
// depth: the error names the chunk and the stage, nothing hangs, nothing is
// written past what the run finished, sinks are abandoned and never
// committed, nothing stays allocated or page-locked beyond what the pipeline
// keeps, and the same pipeline then runs right. On the host executor, which
// can make any operation fail at submission or as it runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "fault_cases.hpp"
#include "run_probes.hpp"
#include "sluice/pipeline/host_executor.hpp"
#include "sluice/pipeline/pipeline.hpp"

using sluice::Chunk;
using sluice::HostExecutor;
using sluice::HostExecutorError;
using sluice::HostExecutorOptions;
using sluice::HostMemoryPolicy;
using sluice::InjectedFault;
using sluice::ItemRange;
using sluice::Pipeline;
using sluice::PipelineOptions;
using sluice::Stage;
using namespace sluice::test;

namespace {

// Four chunks (fault_cases.hpp), the last one short.
constexpr std::size_t item_count = 350, chunk_items = 100;
constexpr std::uint32_t poison = 0xDEADBEEE;  // even: every right output is odd
constexpr auto case_limit = std::chrono::seconds(60);

std::uint32_t input_at(std::size_t i) { return static_cast<std::uint32_t>(item_value(22, i)); }
std::uint32_t output_at(std::size_t i) { return input_at(i) * 2 + 1; }
ItemRange chunk_range(std::size_t c) { return {c * chunk_items, std::min(item_count, (c + 1) * chunk_items)}; }
std::size_t items_in(std::size_t chunks) { return chunks == 0 ? 0 : chunk_range(chunks - 1).end; }

std::atomic<std::size_t> faults_injected{0};

// Prints what every test of this process injected, for the record.
class FaultCount : public ::testing::Environment {
 public:
  void TearDown() override {
    if (faults_injected > 0) std::printf("[faults] %zu faults injected in this process\n", faults_injected.load());
  }
};
const auto* const fault_count = ::testing::AddGlobalTestEnvironment(new FaultCount);

auto input_fill = [](std::size_t i) { return input_at(i); };
using Source = PatternSource<std::uint32_t, decltype(input_fill)>;
using Sink = RecordingSink<std::uint32_t>;

// One pipeline over one mix, run again and again with a fault and without.
class FaultRig {
 public:
  FaultRig(FaultMix mix, std::size_t depth, HostExecutor& host) : mix_(mix), host_(host) {
    PipelineOptions o;
    o.chunk_items = chunk_items;
    o.depth = depth;
    o.staging_threads = 2;
    o.host_memory = mix == FaultMix::registered ? HostMemoryPolicy::register_memory : HostMemoryPolicy::stage;
    pipeline_.emplace(o, host);
    Pipeline& p = *pipeline_;

    sluice::SpanHandle<const std::uint32_t> x;
    if (mix == FaultMix::pinned) {
      pinned_in_ = host.allocate_pinned(item_count * sizeof(std::uint32_t));
      auto in = pinned_in_.as<std::uint32_t>();
      for (std::size_t i = 0; i < item_count; ++i) in[i] = input_at(i);
      x = p.input(in);
    } else if (mix == FaultMix::source) {
      source_ = std::make_shared<Source>(item_count, input_fill);
      x = p.input(sluice::SourceOf<std::uint32_t>{source_});
    } else {
      vector_in_.resize(item_count);
      for (std::size_t i = 0; i < item_count; ++i) vector_in_[i] = input_at(i);
      x = p.input(vector_in_);
    }

    sluice::SpanHandle<std::uint32_t> y;
    if (mix == FaultMix::pinned || mix == FaultMix::source) {
      pinned_out_ = host.allocate_pinned(item_count * sizeof(std::uint32_t));
      out_ = pinned_out_.as<std::uint32_t>();
      y = p.output(out_);
    } else if (mix == FaultMix::sink) {
      sink_ = std::make_shared<Sink>(item_count);
      out_ = sink_->pending;
      y = p.output(sluice::SinkOf<std::uint32_t>{sink_});
    } else {
      vector_out_.resize(item_count);
      out_ = vector_out_;
      y = p.output(vector_out_);
    }

    p.compute([this, x, y](const Chunk& c) {
      if (compute_fails_at_ == c.index) throw ComputeFault("compute gave up at chunk " + std::to_string(c.index));
      const auto in = c[x];
      const auto out = c[y];
      for (std::size_t i = 0; i < c.size(); ++i) out[i] = in[i] * 2 + 1;
    });
  }

  // The next run fails as `c` says.
  void arm(const Case& c) {
    switch (c.fault) {
      case Fault::submit: host_.inject({InjectedFault::Kind::submit, {c.chunk, c.stage}}); break;
      case Fault::execution: host_.inject({InjectedFault::Kind::execution, {c.chunk, c.stage}}); break;
      case Fault::compute_throws: compute_fails_at_ = c.chunk; break;
      case Fault::chunk_done_throws:
        pipeline_->on_chunk_done([at = c.chunk](std::size_t index, ItemRange) {
          if (index == at) throw ChunkDoneFault("chunk-done gave up at chunk " + std::to_string(index));
        });
        break;
      case Fault::source_throws:
      case Fault::source_io_error:
        source_->fail_at = chunk_range(c.chunk).begin + 7;
        source_->throw_io = c.fault == Fault::source_io_error;
        break;
      case Fault::sink_throws: sink_->fail_at = chunk_range(c.chunk).begin + 7; break;
      case Fault::sink_commit: sink_->refuse_commit = true; break;
      case Fault::source_begin: source_->refuse_begin = true; break;
      case Fault::sink_begin: sink_->refuse_begin = true; break;
    }
  }
  void disarm() {
    host_.clear_faults();
    compute_fails_at_ = chunk_count;
    pipeline_->on_chunk_done(nullptr);
    if (source_) {
      source_->fail_at.reset();
      source_->refuse_begin = false;
    }
    if (sink_) {
      sink_->fail_at.reset();
      sink_->refuse_begin = sink_->refuse_commit = false;
    }
  }

  // Poisons the outputs, then runs: with run() or with submit() and wait(),
  // which take different threads through the run.
  void run(bool submitted) {
    std::fill(out_.begin(), out_.end(), poison);
    if (sink_) sink_->reset(poison);
    if (submitted)
      pipeline_->submit().wait();
    else
      pipeline_->run();
  }

  void expect_runs_right(bool submitted) {
    ASSERT_NO_THROW(run(submitted));
    EXPECT_EQ(written_prefix(), chunk_count);
    if (sink_) {
      EXPECT_EQ(contiguous_end(sink_->writes), std::optional<std::size_t>(item_count));
      EXPECT_EQ(sink_->commits, 1u);
      EXPECT_TRUE(sink_->abandons.empty());
      EXPECT_EQ(sink_->committed, sink_->pending);
    }
    expect_holds_only_its_own();
  }

  // Runs with the fault armed and checks everything a failed run promises.
  void expect_fails_as(const Case& c, bool submitted) {
    const std::size_t reads_before = source_ ? source_->reads.load() : 0;
    std::string message;
    std::optional<std::size_t> finished;  // chunks the run finished, as its error says
    try {
      run(submitted);
      ADD_FAILURE() << "the run went through";
      return;
    } catch (const HostExecutorError& e) {
      message = e.what();
      EXPECT_TRUE(c.fault == Fault::submit || c.fault == Fault::execution) << "HostExecutorError for " << c.text();
    } catch (const ComputeFault& e) {
      ADD_FAILURE() << c.text() << ": the compute callable's error came back without the chunk and stage: " << e.what();
    } catch (const ChunkDoneFault& e) {
      ADD_FAILURE() << c.text() << ": the chunk-done callable's error came back without the chunk and stage: " << e.what();
    } catch (const sluice::IoError& e) {
      message = e.what();
      EXPECT_EQ(c.fault, Fault::source_io_error) << message;
    } catch (const ComponentFault& e) {
      // Refusals before any work come back as they were thrown.
      EXPECT_TRUE(c.before_work()) << c.text() << ": " << e.what();
    } catch (const std::runtime_error& e) {
      message = e.what();
      // The callable's, the source's or the sink's own error, nested as it was thrown.
      std::string own;
      try {
        std::rethrow_if_nested(e);
        ADD_FAILURE() << c.text() << ": nothing is nested in: " << message;
      } catch (const ComputeFault& inner) {
        EXPECT_EQ(c.fault, Fault::compute_throws) << message;
        own = inner.what();
        EXPECT_EQ(own, "compute gave up at chunk " + std::to_string(c.chunk));
        EXPECT_EQ(message.rfind("the compute callable threw at ", 0), 0u) << message;
      } catch (const ChunkDoneFault& inner) {
        EXPECT_EQ(c.fault, Fault::chunk_done_throws) << message;
        own = inner.what();
        EXPECT_EQ(own, "chunk-done gave up at chunk " + std::to_string(c.chunk));
        EXPECT_EQ(message.rfind("the chunk-done callable threw at ", 0), 0u) << message;
      } catch (const ComponentFault& inner) {
        EXPECT_TRUE(c.fault == Fault::source_throws || c.fault == Fault::sink_throws || c.fault == Fault::sink_commit)
            << c.text() << ": " << message;
        own = inner.what();
      } catch (...) {
        ADD_FAILURE() << c.text() << ": something else is nested in: " << message;
      }
      if (!own.empty()) {
        EXPECT_TRUE(message.size() >= own.size() && message.compare(message.size() - own.size(), own.size(), own) == 0)
            << "the message does not end in the nested error's: " << message;
      }
    }

    if (!message.empty()) {
      // Where the engine puts it: chunk, stage, and how far the run got (run_finish.cpp).
      const std::string stage_text = expected_stage_text(c);
      const ItemRange r = chunk_range(c.chunk);
      const std::string where = "chunk " + std::to_string(c.chunk) + " of " + std::to_string(chunk_count) + " (items " +
                                std::to_string(r.begin) + ".." + std::to_string(r.end) + "), stage " + stage_text;
      EXPECT_NE(message.find(where), std::string::npos) << c.text() << ": expected '" << where << "' in: " << message;
      std::smatch m;
      static const std::regex stopped(R"(the run stopped with (\d+) of (\d+) chunks finished)");
      if (std::regex_search(message, m, stopped)) {
        finished = std::stoul(m[1]);
        EXPECT_EQ(std::stoul(m[2]), chunk_count) << message;
      } else {
        ADD_FAILURE() << "the error does not say how far the run got: " << message;
      }
    }

    const std::size_t prefix = written_prefix();
    if (!c.before_work()) {
      EXPECT_FALSE(message.empty()) << c.text() << ": the error does not say where the run stopped";
    }
    if (c.before_work()) {
      EXPECT_EQ(prefix, 0u);
      if (source_) {
        EXPECT_EQ(source_->reads.load(), reads_before) << "a refused run read its source";
      }
    } else if (c.fault == Fault::sink_commit) {
      EXPECT_EQ(prefix, chunk_count);
      EXPECT_EQ(finished, std::optional<std::size_t>(chunk_count));
    } else {
      // A prefix of chunks is written, nothing after it; what it holds is what the run finished.
      if (finished) {
        if (c.fault == Fault::chunk_done_throws) {
          // The callable is told of a chunk once its outputs are written: the chunk it threw at is finished.
          EXPECT_EQ(*finished, c.chunk + 1) << c.text();
        } else {
          EXPECT_LE(*finished, c.chunk) << c.text() << ": more chunks finished than the failure allows";
        }
        EXPECT_GE(prefix, *finished) << c.text() << ": a finished chunk's output is missing";
        if (output_host_pass(mix_)) {
          EXPECT_EQ(prefix, *finished) << c.text() << ": output written past the chunks the run finished";
        }
      }
      if (c.after_d2h()) {
        EXPECT_GE(prefix, output_host_pass(mix_) ? c.chunk : c.chunk + 1) << c.text();
      } else {
        EXPECT_LE(prefix, c.chunk) << c.text() << ": output written at or after the failed chunk";
      }
    }

    if (sink_) {
      // In chunk order, from item 0, and nothing past the last finished chunk.
      const auto end = contiguous_end(sink_->writes);
      ASSERT_TRUE(end.has_value()) << c.text() << ": sink writes out of order";
      EXPECT_EQ(*end, items_in(prefix)) << c.text();
      EXPECT_EQ(sink_->commits, 0u) << c.text() << ": a failed run committed its sink";
      if (c.fault == Fault::sink_begin) {
        // The refusing sink has no run to abandon.
        EXPECT_TRUE(sink_->abandons.empty()) << c.text();
      } else if (c.fault == Fault::sink_commit) {
        // A sink that could not commit is abandoned, with everything written (source.hpp's contract).
        ASSERT_EQ(sink_->abandons.size(), 1u) << c.text() << ": the sink whose commit failed was not abandoned once";
        EXPECT_EQ(sink_->abandons[0], items_in(prefix)) << c.text();
      } else if (c.before_work()) {
        EXPECT_EQ(sink_->begun, 0u) << c.text() << ": a sink began a run refused before work";
        EXPECT_TRUE(sink_->abandons.empty()) << c.text();
      } else {
        ASSERT_EQ(sink_->abandons.size(), 1u) << c.text() << ": the sink was not abandoned once";
        if (finished) {
          EXPECT_EQ(sink_->abandons[0], items_in(*finished)) << c.text();
        }
      }
      EXPECT_EQ(sink_->committed, committed_before_) << c.text() << ": the previous output was changed";
    }
    expect_holds_only_its_own();
  }

  // After the first run that went through: what the pipeline keeps from run to run.
  void remember_holdings() {
    kept_ = host_.holdings();
    if (sink_) committed_before_ = sink_->committed;
  }

  Source* source() { return source_.get(); }
  Sink* sink() { return sink_.get(); }

 private:
  // The chunks at the start of the output holding right values; every chunk
  // after them must still hold the poison.
  std::size_t written_prefix() const {
    std::vector<ItemRange> chunks;
    for (std::size_t c = 0; c < chunk_count; ++c) chunks.push_back(chunk_range(c));
    const WrittenChunks w = written_chunks<std::uint32_t>(out_, chunks, output_at, poison);
    EXPECT_TRUE(w.problem.empty()) << name(mix_) << ": " << w.problem;
    return w.prefix;
  }

  std::string expected_stage_text(const Case& c) const {
    switch (c.fault) {
      case Fault::source_throws:
      case Fault::source_io_error: return "stage-in, span 0 (input, pattern source)";
      case Fault::sink_throws: return "stage-out, span 1 (output, recording sink)";
      case Fault::sink_commit: return "commit, span 1 (output, recording sink)";
      case Fault::chunk_done_throws: return "chunk done";
      default: return std::string(to_string(c.stage));
    }
  }

  // Nothing page-locked outlives a run; slot memory stays as the first run left it.
  void expect_holds_only_its_own() {
    const HostExecutor::Holdings h = host_.holdings();
    EXPECT_EQ(h.locked_ranges, 0u) << "page-locked ranges left after a run";
    EXPECT_EQ(h.lane_threads, 3u);  // H2D, D2H, one compute stream
    if (kept_) {
      EXPECT_EQ(h.device_bytes, kept_->device_bytes) << "device memory grew";
      EXPECT_EQ(h.pinned_bytes, kept_->pinned_bytes) << "pinned memory grew";
    }
    EXPECT_TRUE(host_.violations().empty()) << host_.violations().front();
  }

  FaultMix mix_;
  HostExecutor& host_;
  std::optional<Pipeline> pipeline_;
  HostExecutor::Buffer pinned_in_, pinned_out_;
  std::vector<std::uint32_t> vector_in_, vector_out_;
  std::shared_ptr<Source> source_;
  std::shared_ptr<Sink> sink_;
  std::span<std::uint32_t> out_;
  std::atomic<std::size_t> compute_fails_at_{chunk_count};
  std::optional<HostExecutor::Holdings> kept_;
  std::vector<std::uint32_t> committed_before_;
};

class EveryFault : public ::testing::TestWithParam<FaultMix> {};

TEST_P(EveryFault, AtEveryOperationAndDepthLeavesOutputsWholeAndThePipelineUsable) {
  const FaultMix mix = GetParam();
  std::size_t injected = 0;
  for (std::size_t depth = 1; depth <= 4; ++depth) {
    HostExecutorOptions ho;
    ho.jitter_us = depth % 2 == 0 ? 20 : 0;  // some runs meet in other orders
    ho.seed = depth;
    HostExecutor host(ho);
    {
      FaultRig rig(mix, depth, host);
      // Slot memory that cannot be had: refused before any work.
      within(case_limit, name(mix) + " allocation failure", [&] {
        host.inject({InjectedFault::Kind::allocation, {}});
        try {
          rig.run(false);
          ADD_FAILURE() << "an allocation failure went unnoticed";
        } catch (const HostExecutorError& e) {
          EXPECT_NE(std::string(e.what()).find("allocation"), std::string::npos) << e.what();
        }
        if (rig.source()) {
          EXPECT_EQ(rig.source()->reads.load(), 0u) << "read before the run was refused";
        }
        if (rig.sink()) {
          EXPECT_EQ(rig.sink()->begun, 0u) << "a sink began a run refused before work";
        }
        ++injected;
        rig.disarm();
        rig.expect_runs_right(false);
      });
      rig.remember_holdings();

      std::size_t n = 0;
      for (const Case& c : cases_for(mix)) {
        const bool submitted = n++ % 2 == 1;
        within(case_limit, name(mix) + ", depth " + std::to_string(depth) + ": " + c.text(), [&] {
          SCOPED_TRACE(name(mix) + ", depth " + std::to_string(depth) + ": " + c.text());
          rig.arm(c);
          rig.expect_fails_as(c, submitted);
          ++injected;
          rig.disarm();
          rig.expect_runs_right(!submitted);
        });
        if (HasFatalFailure()) return;
      }
    }
    // The pipeline gone, everything it held is back.
    const HostExecutor::Holdings h = host.holdings();
    EXPECT_EQ(h.device_bytes, 0u);
    EXPECT_EQ(h.pinned_bytes, 0u);
    EXPECT_EQ(h.locked_ranges, 0u);
    EXPECT_EQ(h.lane_threads, 0u);
  }
  faults_injected += injected;
  std::printf("[faults] %s spans: %zu faults injected over depths 1-4, each followed by a verified run\n",
              name(mix).c_str(), injected);
  RecordProperty("faults_injected", static_cast<int>(injected));
}

INSTANTIATE_TEST_SUITE_P(Spans, EveryFault,
                         ::testing::Values(FaultMix::pinned, FaultMix::staged, FaultMix::registered, FaultMix::source, FaultMix::sink),
                         [](const ::testing::TestParamInfo<FaultMix>& param) { return name(param.param); });

}  // namespace
