#pragma once
// The faults test_pipeline_faults.cpp makes, and the spans it makes them on;
// the GPU's fault tests run over the same mixes of spans. Host-only.
#include <cstddef>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sluice/pipeline/schedule.hpp"

namespace sluice::test {

// Chunks in a fault test's run.
inline constexpr std::size_t chunk_count = 4;

// The spans of a run: where its input comes from and its output goes.
enum class FaultMix {
  pinned,      // page-locked memory both ways (allocate_pinned, PinnedBuffer): copied directly
  staged,      // std::vectors, HostMemoryPolicy::stage
  registered,  // std::vectors, HostMemoryPolicy::register_memory (page-locked for each run)
  source,      // a Source fills the input's pinned slots; pinned output
  sink,        // staged input; a Sink takes the output from its pinned slots
};
inline std::string name(FaultMix mix) {
  switch (mix) {
    case FaultMix::pinned: return "pinned";
    case FaultMix::staged: return "staged";
    case FaultMix::registered: return "registered";
    case FaultMix::source: return "source";
    case FaultMix::sink: return "sink";
  }
  return "?";
}
// For GoogleTest's names of parameterised tests.
inline void PrintTo(FaultMix mix, std::ostream* os) { *os << name(mix); }
inline bool stages_in(FaultMix mix) { return mix == FaultMix::staged || mix == FaultMix::source || mix == FaultMix::sink; }
// Whether the output passes through the host after its D2H (staged, sink).
inline bool output_host_pass(FaultMix mix) { return mix == FaultMix::staged || mix == FaultMix::sink; }

// The compute and chunk-done callables' own failures, of types the pipeline
// must keep as they were thrown, nested in the error that names the chunk
// and the stage.
struct ComputeFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct ChunkDoneFault : std::logic_error {
  using std::logic_error::logic_error;
};

enum class Fault {
  submit,            // the executor refuses an operation at submission
  execution,         // an operation fails as it runs (sticky, as a CUDA error is)
  compute_throws,    // the compute callable throws
  chunk_done_throws, // the chunk-done callable throws
  source_throws,     // Source::read throws
  source_io_error,   // Source::read throws sluice::IoError
  sink_throws,       // Sink::write throws
  sink_commit,       // Sink::commit throws
  source_begin,      // Source::begin_run refuses
  sink_begin,        // Sink::begin_run refuses
};

struct Case {
  Fault fault;
  std::size_t chunk = 0;
  Stage stage = Stage::compute;
  std::string text() const {
    static const char* names[] = {"submit",      "execution",       "compute throws", "chunk-done throws",
                                  "source throws", "source IoError", "sink throws",    "sink commit throws",
                                  "source begin", "sink begin"};
    return std::string(names[static_cast<int>(fault)]) + " at chunk " + std::to_string(chunk) + ", stage " +
           std::string(to_string(stage));
  }
  // The failure happens on the host after the chunk's D2H: direct outputs of
  // later chunks may land (they are right; nothing recalls a finished copy).
  bool after_d2h() const {
    return fault == Fault::chunk_done_throws || (fault == Fault::execution && stage == Stage::stage_out) ||
           fault == Fault::sink_throws || fault == Fault::sink_commit;
  }
  bool before_work() const { return fault == Fault::source_begin || fault == Fault::sink_begin; }
};

inline std::vector<Case> cases_for(FaultMix mix) {
  std::vector<Case> cases;
  for (std::size_t c = 0; c < chunk_count; ++c) {
    for (Stage s : {Stage::stage_in, Stage::h2d, Stage::compute, Stage::d2h, Stage::stage_out})
      if (s != Stage::stage_in || stages_in(mix)) cases.push_back({Fault::execution, c, s});
    for (Stage s : {Stage::h2d, Stage::compute, Stage::d2h}) cases.push_back({Fault::submit, c, s});
    cases.push_back({Fault::compute_throws, c, Stage::compute});
    cases.push_back({Fault::chunk_done_throws, c, Stage::stage_out});
    if (mix == FaultMix::source) {
      cases.push_back({Fault::source_throws, c, Stage::stage_in});
      cases.push_back({Fault::source_io_error, c, Stage::stage_in});
    }
    if (mix == FaultMix::sink) cases.push_back({Fault::sink_throws, c, Stage::stage_out});
  }
  if (mix == FaultMix::source) cases.push_back({Fault::source_begin, 0, Stage::stage_in});
  if (mix == FaultMix::sink) {
    cases.push_back({Fault::sink_begin, 0, Stage::stage_out});
    cases.push_back({Fault::sink_commit, chunk_count - 1, Stage::stage_out});
  }
  return cases;
}

}  // namespace sluice::test
