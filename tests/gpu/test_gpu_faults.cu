// Failures on the GPU, over the mixes of spans the host fault suite uses
// (tests/host/fault_cases.hpp). At every chunk and depth 1-4: a launch the
// runtime refuses, a copy it refuses, the compute and chunk-done callables,
// a source and a sink throwing; the error names the chunk and the stage,
// nothing hangs, only a prefix of chunks is written, a sink is abandoned and
// not committed, nothing stays registered, and the same pipeline then runs
// right. And, each in a child process because it breaks the CUDA context for
// good: a kernel that faults, and a copy from a wild device address.
#include <unistd.h>

#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "../host/fault_cases.hpp"
#include "../host/run_probes.hpp"
#include "gpu_test.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/pointer_query.hpp"
#include "sluice/pipeline/pipeline.hpp"

using sluice::Chunk;
using sluice::HostMemoryPolicy;
using sluice::ItemRange;
using sluice::MemoryKind;
using sluice::Pipeline;
using sluice::PipelineOptions;
using namespace sluice::test;

namespace {

constexpr std::size_t item_count = 3500, chunk_items = 1000;  // four chunks, the last one short
constexpr std::uint32_t poison = 0xDEADBEEE;                  // even: every right output is odd
constexpr auto case_limit = std::chrono::seconds(120);

std::uint32_t input_at(std::size_t i) { return static_cast<std::uint32_t>(item_value(23, i)); }
std::uint32_t output_at(std::size_t i) { return input_at(i) * 2 + 1; }
ItemRange chunk_range(std::size_t c) { return {c * chunk_items, std::min(item_count, (c + 1) * chunk_items)}; }
std::size_t items_in(std::size_t chunks) { return chunks == 0 ? 0 : chunk_range(chunks - 1).end; }

__global__ void double_plus_one(const std::uint32_t* in, std::uint32_t* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    out[i] = in[i] * 2 + 1;
}
// A few milliseconds of work, as real kernels take: the chunks before the
// fault finish, and the driver has submitted every chunk before it happens.
__device__ void spin() {
  const long long start = clock64();
  while (clock64() - start < 4'000'000) {}
}
__global__ void spin_kernel() { spin(); }
// Writes far outside any allocation, after the spin.
__global__ void write_wild(std::uint32_t* out) {
  spin();
  if (threadIdx.x == 0 && blockIdx.x == 0) out[std::size_t{1} << 40] = 1;
}

enum class GpuFault {
  launch_refused,     // a launch of 4096 threads per block: refused at once, not sticky
  copy_refused,       // a cudaMemcpyAsync of no valid direction: refused at once, not sticky
  compute_throws,
  chunk_done_throws,
  source_throws,
  sink_throws,
  sink_commit,
  kernel_faults,      // sticky: child process only
  wild_copy,          // a copy from 1 TiB past the slot, refused at once or faulting as it runs: child process only
};
const char* name(GpuFault f) {
  static const char* names[] = {"launch refused", "copy refused", "compute throws", "chunk-done throws",
                                "source throws",  "sink throws",  "sink commit throws", "kernel faults", "wild copy"};
  return names[static_cast<int>(f)];
}
// The failure happens on the host after the chunk's D2H.
bool after_d2h(GpuFault f) {
  return f == GpuFault::chunk_done_throws || f == GpuFault::sink_throws || f == GpuFault::sink_commit;
}

using Source = PatternSource<std::uint32_t, std::uint32_t (*)(std::size_t)>;
using Sink = RecordingSink<std::uint32_t>;

// One pipeline over one mix on the GPU, run again and again with a fault and without.
class GpuRig {
 public:
  GpuRig(FaultMix mix, std::size_t depth) : mix_(mix) {
    PipelineOptions o;
    o.chunk_items = chunk_items;
    o.depth = depth;
    o.host_memory = mix == FaultMix::registered ? HostMemoryPolicy::register_memory : HostMemoryPolicy::stage;
    pipeline_.emplace(o);
    Pipeline& p = *pipeline_;
    sluice::SpanHandle<const std::uint32_t> x;
    if (mix == FaultMix::pinned) {
      pinned_in_ = sluice::PinnedBuffer<std::uint32_t>(item_count);
      for (std::size_t i = 0; i < item_count; ++i) pinned_in_[i] = input_at(i);
      x = p.input(pinned_in_.span());
    } else if (mix == FaultMix::source) {
      source_ = std::make_shared<Source>(item_count, &input_at);
      x = p.input(sluice::SourceOf<std::uint32_t>{source_});
    } else {
      vector_in_.resize(item_count);
      for (std::size_t i = 0; i < item_count; ++i) vector_in_[i] = input_at(i);
      x = p.input(vector_in_);
    }
    sluice::SpanHandle<std::uint32_t> y;
    if (mix == FaultMix::pinned || mix == FaultMix::source) {
      pinned_out_ = sluice::PinnedBuffer<std::uint32_t>(item_count);
      out_ = pinned_out_.span();
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
      const auto in = c[x];
      const auto out = c[y];
      const unsigned blocks = static_cast<unsigned>((c.size() + 255) / 256);
      if (fault_at_ == c.index) {
        switch (fault_) {
          case GpuFault::launch_refused: double_plus_one<<<1, 4096, 0, c.stream.get()>>>(in.data(), out.data(), c.size()); return;
          case GpuFault::copy_refused:
            SLUICE_CUDA_CHECK(cudaMemcpyAsync(out.data(), in.data(), c.size() * 4, static_cast<cudaMemcpyKind>(42), c.stream.get()));
            return;
          case GpuFault::compute_throws: throw ComputeFault("compute gave up at chunk " + std::to_string(c.index));
          case GpuFault::kernel_faults: write_wild<<<1, 32, 0, c.stream.get()>>>(out.data()); return;
          case GpuFault::wild_copy:
            spin_kernel<<<1, 32, 0, c.stream.get()>>>();
            SLUICE_CUDA_CHECK(cudaMemcpyAsync(out.data(), in.data() + (std::size_t{1} << 38), c.size() * 4,
                                              cudaMemcpyDeviceToDevice, c.stream.get()));
            return;
          default: break;
        }
      }
      double_plus_one<<<blocks, 256, 0, c.stream.get()>>>(in.data(), out.data(), c.size());
    });
  }

  void arm(GpuFault fault, std::size_t chunk) {
    fault_ = fault;
    fault_at_ = chunk;
    if (fault == GpuFault::chunk_done_throws)
      pipeline_->on_chunk_done([chunk](std::size_t index, ItemRange) {
        if (index == chunk) throw ChunkDoneFault("chunk-done gave up at chunk " + std::to_string(index));
      });
    if (fault == GpuFault::source_throws) source_->fail_at = chunk_range(chunk).begin + 7;
    if (fault == GpuFault::sink_throws) sink_->fail_at = chunk_range(chunk).begin + 7;
    if (fault == GpuFault::sink_commit) sink_->refuse_commit = true;
  }
  void disarm() {
    fault_at_ = chunk_count;
    pipeline_->on_chunk_done(nullptr);
    if (source_) source_->fail_at.reset();
    if (sink_) {
      sink_->fail_at.reset();
      sink_->refuse_commit = false;
    }
  }

  void run() {
    std::fill(out_.begin(), out_.end(), poison);
    if (sink_) sink_->reset(poison);
    pipeline_->run();
  }

  // What is wrong with a run that went through; empty when nothing is.
  std::string runs_right() {
    std::ostringstream problems;
    try {
      run();
    } catch (const std::exception& e) {
      return std::string("the run failed: ") + e.what();
    }
    const WrittenChunks w = written_chunks<std::uint32_t>(out_, chunks(), output_at, poison);
    if (w.prefix != chunk_count || !w.problem.empty()) problems << "outputs wrong: " << w.problem << "; ";
    if (sink_ && (sink_->commits != 1 || !sink_->abandons.empty() || sink_->committed != sink_->pending))
      problems << "the sink was not committed once; ";
    problems << left_registered();
    if (sink_) committed_ = sink_->committed;
    return problems.str();
  }

  // What is wrong with how a run failed at `chunk`; empty when nothing is.
  std::string fails_as(GpuFault fault, std::size_t chunk) {
    std::ostringstream problems;
    std::string message;
    std::optional<std::size_t> finished;
    const bool sticky = fault == GpuFault::kernel_faults || fault == GpuFault::wild_copy;
    std::size_t named_chunk = chunk;  // where the error puts the failure
    try {
      run();
      return "the run went through";
    } catch (const sluice::CudaError& e) {
      message = e.what();
      if (fault != GpuFault::launch_refused && fault != GpuFault::copy_refused && !sticky) problems << "a CudaError; ";
    } catch (const ComputeFault& e) {
      problems << "the compute callable's error came back without the chunk and stage: " << e.what() << "; ";
    } catch (const ChunkDoneFault& e) {
      problems << "the chunk-done callable's error came back without the chunk and stage: " << e.what() << "; ";
    } catch (const std::runtime_error& e) {
      message = e.what();
      // The callable's, the source's or the sink's own error, nested as it was thrown.
      try {
        std::rethrow_if_nested(e);
        problems << "nothing nested in: " << message << "; ";
      } catch (const ComputeFault& own) {
        if (fault != GpuFault::compute_throws || own.what() != "compute gave up at chunk " + std::to_string(chunk) ||
            message.rfind("the compute callable threw at ", 0) != 0)
          problems << "the compute callable's error changed: " << message << "; ";
      } catch (const ChunkDoneFault& own) {
        if (fault != GpuFault::chunk_done_throws || own.what() != "chunk-done gave up at chunk " + std::to_string(chunk) ||
            message.rfind("the chunk-done callable threw at ", 0) != 0)
          problems << "the chunk-done callable's error changed: " << message << "; ";
      } catch (const ComponentFault&) {
      } catch (...) {
        problems << "something else nested in: " << message << "; ";
      }
    }
    if (!message.empty()) {
      std::smatch m;
      static const std::regex where(R"(chunk (\d+) of 4 \(items \d+\.\.\d+\), stage (.*?) \(the run stopped with (\d+) of 4 chunks finished\))");
      if (!std::regex_search(message, m, where)) return "the error does not say where the run stopped: " + message;
      named_chunk = std::stoul(m[1]);
      finished = std::stoul(m[3]);
      const std::string expected_stage = fault == GpuFault::source_throws ? "stage-in, span 0 (input, pattern source)"
                                         : fault == GpuFault::sink_throws ? "stage-out, span 1 (output, recording sink)"
                                         : fault == GpuFault::sink_commit ? "commit, span 1 (output, recording sink)"
                                         : fault == GpuFault::chunk_done_throws ? "chunk done"
                                                                                : "compute";
      if (m[2] != expected_stage) problems << "the error names stage '" << m[2] << "', not '" << expected_stage << "'; ";
      // A fault seen only when a later copy's event reports it is put "at or
      // after" a chunk whose predecessors had all completed: never later than it happened.
      if (sticky ? named_chunk > chunk : named_chunk != (fault == GpuFault::sink_commit ? chunk_count - 1 : chunk))
        problems << "the error names chunk " << named_chunk << ", the fault was at " << chunk << "; ";
    }
    const WrittenChunks w = written_chunks<std::uint32_t>(out_, chunks(), output_at, poison);
    if (!w.problem.empty()) problems << w.problem << "; ";
    const bool host_pass = mix_ == FaultMix::staged || mix_ == FaultMix::sink;
    if (!finished && host_pass) finished = w.prefix;
    if (fault == GpuFault::sink_commit) {
      if (w.prefix != chunk_count || finished != std::optional<std::size_t>(chunk_count)) problems << "commit: not all written; ";
    } else {
      // The chunk-done callable is told of a chunk once its outputs are written: the chunk it threw at is finished.
      const std::size_t most = fault == GpuFault::chunk_done_throws ? chunk + 1 : chunk;
      if (finished && (*finished > most || w.prefix < *finished)) problems << "finished " << *finished << ", written " << w.prefix << "; ";
      if (fault == GpuFault::chunk_done_throws && finished != std::optional<std::size_t>(chunk + 1))
        problems << "the chunk-done callable threw at chunk " << chunk << ", yet the run did not finish it; ";
      if (finished && host_pass && w.prefix != *finished)
        problems << "written past the chunks finished (" << w.prefix << " written); ";
      if (after_d2h(fault) ? w.prefix < (host_pass ? chunk : chunk + 1) : w.prefix > chunk)
        problems << w.prefix << " chunks written for a fault at chunk " << chunk << "; ";
    }
    if (sink_) {
      if (contiguous_end(sink_->writes) != std::optional<std::size_t>(items_in(w.prefix))) problems << "sink writes; ";
      if (sink_->commits != 0) problems << "a failed run committed its sink; ";
      // A sink that could not commit is abandoned too, with everything written (source.hpp).
      if (sink_->abandons.size() != 1) problems << "abandoned " << sink_->abandons.size() << " times; ";
      if (sink_->abandons.size() == 1 && finished && sink_->abandons[0] != items_in(*finished))
        problems << "abandoned at the wrong item; ";
      if (sink_->committed != committed_) problems << "the previous output changed; ";
    }
    if (!sticky) problems << left_registered();  // a broken context answers no more queries
    return problems.str();
  }

 private:
  static std::vector<ItemRange> chunks() {
    std::vector<ItemRange> all;
    for (std::size_t c = 0; c < chunk_count; ++c) all.push_back(chunk_range(c));
    return all;
  }
  // Vectors lent to the pipeline are pageable again once a run has returned, however it ended.
  std::string left_registered() const {
    for (const auto* v : {&vector_in_, &vector_out_})
      if (!v->empty() && sluice::memory_kind(v->data(), v->size() * sizeof(std::uint32_t)) != MemoryKind::pageable)
        return "a lent vector was left page-locked; ";
    return {};
  }

  FaultMix mix_;
  std::optional<Pipeline> pipeline_;
  sluice::PinnedBuffer<std::uint32_t> pinned_in_, pinned_out_;
  std::vector<std::uint32_t> vector_in_, vector_out_;
  std::shared_ptr<Source> source_;
  std::shared_ptr<Sink> sink_;
  std::span<std::uint32_t> out_;
  GpuFault fault_ = GpuFault::compute_throws;
  std::size_t fault_at_ = chunk_count;
  std::vector<std::uint32_t> committed_;
};

constexpr FaultMix all_mixes[] = {FaultMix::pinned, FaultMix::staged, FaultMix::registered, FaultMix::source, FaultMix::sink};

class GpuFaults : public GpuTest {};

}  // namespace

TEST_F(GpuFaults, EveryRecoverableFaultAtEveryChunkAndDepthLeavesThePipelineUsable) {
  std::size_t injected = 0;
  for (const FaultMix mix : all_mixes) {
    std::vector<GpuFault> faults = {GpuFault::launch_refused, GpuFault::copy_refused, GpuFault::compute_throws,
                                    GpuFault::chunk_done_throws};
    if (mix == FaultMix::source) faults.push_back(GpuFault::source_throws);
    if (mix == FaultMix::sink) faults.insert(faults.end(), {GpuFault::sink_throws, GpuFault::sink_commit});
    for (std::size_t depth = 1; depth <= 4; ++depth) {
      GpuRig rig(mix, depth);
      EXPECT_EQ(rig.runs_right(), "") << name(mix) << ", depth " << depth << ", first run";
      for (const GpuFault fault : faults)
        for (std::size_t chunk = 0; chunk < chunk_count; ++chunk) {
          if (fault == GpuFault::sink_commit && chunk + 1 != chunk_count) continue;
          const std::string what = name(mix) + ", depth " + std::to_string(depth) + ": " + name(fault) + " at chunk " +
                                   std::to_string(chunk);
          within(case_limit, what, [&] {
            rig.arm(fault, chunk);
            EXPECT_EQ(rig.fails_as(fault, chunk), "") << what;
            rig.disarm();
            EXPECT_EQ(rig.runs_right(), "") << what << ", the run after it";
          });
          ++injected;
        }
    }
  }
  std::printf("[faults] GPU: %zu recoverable faults injected, each followed by a verified run\n", injected);
  RecordProperty("faults_injected", static_cast<int>(injected));
}

// A fault that breaks the context: each in a child process of its own (a
// "threadsafe" death test runs the binary again), which must report it,
// name where, write nothing past it, abandon its sink, release everything
// without hanging (an alarm ends a child that hangs) and exit.
TEST_F(GpuFaults, AKernelFaultOrAWildCopyIsReportedInEveryMix) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const GpuFault fault : {GpuFault::kernel_faults, GpuFault::wild_copy})
    for (const FaultMix mix : all_mixes) {
      EXPECT_EXIT(
          {
            alarm(120);
            std::string problems;
            {
              GpuRig rig(mix, 2);
              problems = rig.runs_right();
              rig.arm(fault, 2);
              if (problems.empty()) problems = rig.fails_as(fault, 2);
            }  // released after the fault: must not hang
            if (!problems.empty()) {
              std::fprintf(stderr, "PROBLEMS: %s\n", problems.c_str());
              std::exit(1);
            }
            std::fprintf(stderr, "fault reported\n");
            std::exit(0);
          },
          ::testing::ExitedWithCode(0), "fault reported")
          << name(fault) << ", " << name(mix);
    }
}
