#pragma once
// The chunk sizes a pipeline uses when the caller sets none. Host-only.
//
// The chunk is sqrt(bytes x 0.25 MiB) of the widest span, within [1 MiB,
// 16 MiB], every chunk the same size: a larger chunk lengthens the fill and
// drain (the first copy in and the last copy out run alone), more chunks pay
// more fixed costs (an event wait, a launch, a gap of a few microseconds
// between copies); the square root balances the two. Data of 2 MiB or less
// is one chunk: below that, splitting costs more than it overlaps (unless the
// kernels dominate, below).
//
// No ramp for work whose copies decide: with both copy directions busy, a chunk that doubles
// the last one keeps the D2H waiting for its H2D, so the fill is no shorter
// than with equal chunks, and `sluice tune` on the H200 (final rounds) put
// equal chunks ahead on copy-bound work (copy 256 MiB: 8 MiB chunks 5.71 ms,
// the earlier ramped default 5.85; sincos20 5.86 against 6.42; 4 MiB: 0.189
// against 0.211 ms). A ramp stays one option away
// (PipelineOptions::first_chunk_items).
//
// Work whose kernels take longer than its copies is the other way round:
// there the SMs wait for the first chunk in and the last chunk out, and
// smaller chunks at both ends shorten both. The same sweep on sincos100 and
// sincos200 (kernel 2.2 and 4.3 times the copies), ms, H200:
//
//                        defaults   512 KiB chunks   ramp from 512 KiB / 128 KiB
//   sincos100  4 MiB      0.262       0.254-0.257          0.282 (128 KiB)
//   sincos200  4 MiB      0.446       0.421                0.435 (128 KiB)
//   sincos100 16 MiB      0.823       0.772                0.776 (8 MiB from 512 KiB)
//   sincos200 16 MiB      1.497       1.451                1.437 (8 MiB from 512 KiB)
//
// while on copy-bound work 512 KiB chunks were 7-31 % slower (the host's
// work per chunk, about 12 us, outruns a 512 KiB chunk's copies). The
// pipeline cannot tell the two apart before a run, so a run can learn it:
// PipelineOptions::adapt_chunks times the first run's stages, and where the
// kernels dominate, later runs ramp up from 512 KiB to the usual chunk.
//
// Where the kernels may overlap (two compute streams or more) and the usual
// chunk is 2 MiB or less (data up to 16 MiB), equal 512 KiB chunks do better
// than the ramp: at 4 MiB the ramp is 512 KiB, three of 1 MiB, 512 KiB, and
// its last small chunk still waits behind a 1 MiB copy out and a 1 MiB
// kernel beside it. `sluice bench` on the H200, one call per row, the
// rounds after the sweep (ms; the staircase of 12-16 streams in each call):
//
//                        learnt ramp   512 KiB chunks   256 KiB   staircase
//   sincos100  4 MiB       0.257         0.239           0.260    0.230-0.234
//   sincos200  4 MiB       0.419         0.419           0.422    0.397-0.399
//   sincos100 16 MiB       0.767         0.756           --       0.756-0.765
//   sincos200 16 MiB       1.423         1.426           1.530    1.422-1.432
//
// With kernels in chunk order (one stream) 512 KiB kernels leave each
// one's tail idle (sincos100 16 MiB: 0.920 against 0.832 ramped), so those
// keep the ramp, as do larger runs.
//
// A replayed run (Replay::graph) has no host work per chunk, so its ramp
// starts at a sixteenth of the chunk (64 KiB at least). `sluice tune
// --replayed` on the H200, ms, replayed runs:
//
//                       defaults   ramp from 1/16 of the chunk   best of the sweep
//   sincos100  4 MiB     0.269      0.242 (1 MiB from 64 KiB)     0.231 (256 KiB chunks, depth 8, 4 streams)
//   sincos200  4 MiB     0.457      0.424                         0.403 (2 MiB from 128 KiB)
//   sincos100 16 MiB     0.828      0.784 (2 MiB from 128 KiB)    0.742 (256 KiB chunks, depth 8, 4 streams)
//   sincos200 16 MiB     1.501      1.407                         1.407 (the same)
//   sincos100 64 MiB     2.935      2.823 (4 MiB from 256 KiB)    2.784 (1 MiB from 64 KiB, depth 6)
//   sincos200 64 MiB     5.619      5.443                         5.443 (the same)
//
// (defaults from the final rounds, the rest from the sweep; depth 4 but
// where said.) Smaller equal chunks, deeper rings and more compute streams
// win at 4-16 MiB, but only where the caller's kernels may overlap and at
// the cost of more slots: the ramp keeps the caller's depth and streams.
// Copy-bound work gained nothing there from smaller chunks (copy 4 MiB: 1
// MiB chunks, the defaults, were the best), so a replayed pipeline learns
// too: its first run is captured with a timing mark around every stage.
//
// A run whose host copies data through the pinned slots both ways (staged
// spans, sources and sinks, in and out) uses 4 MiB chunks where the data
// allows eight chunks or more, with six stage-in slots (schedule.hpp).
// There the staging threads and both copy engines share host memory, and
// what counts is how far stage-in runs ahead of the H2D copies and whether
// the slots stay in the last-level cache. Staged runs on the H200's host, ms
// (interleaved runs, medians of 9 and 5, the output poisoned before each as
// the bench does):
//
//   chunk / stage-in slots    8 MiB / 3   4 MiB / 3   4 MiB / 6   8 MiB / 6
//   copy 256 MiB              8.00        9.08        7.10        9.09
//   vadd 256 MiB             13.65       12.41       12.21       14.57
//   copy 1 GiB               27.86       34.54       25.82       26.79
//   vadd 1 GiB               46.26       46.88       44.68       52.12
//
// A second host put 4 MiB / 6 ahead again, and 4 MiB / 12 behind it (8.72,
// 13.85, 26.15, 48.89 against 7.33, 12.77, 26.21, 44.87). Stage-out jobs go
// first whenever a D2H has finished, so stage-in falls behind in bursts: 24
// MiB of lead absorbs them, 48 MiB spills the slots out of the cache. 2 MiB
// chunks paid their per-chunk costs too often (copy 1 GiB: 39 ms), 16 MiB
// chunks fell out of the cache (31 ms). A run whose host copies one way only
// keeps the usual sizes: a 2 GiB reduction read from a file took 45 ms in
// 16 MiB chunks and 79 ms in 8 MiB (from a staged array, 44 and 52).
#include <cstddef>

#include "sluice/pipeline/chunk_plan.hpp"
#include "sluice/pipeline/pipeline_options.hpp"

namespace sluice {

struct Chunking {
  std::size_t chunk_items = 1;  // the largest chunk
  std::size_t first_items = 1;  // where a ramp starts; == chunk_items for none (the default)
};

// What the planner knows of a run besides its size.
struct RunFacts {
  // The host copies the run's data through the pinned slots on the way in
  // and on the way out (staged spans, sources and sinks, both ways).
  bool host_copies_both_ways = false;
  // The kernels are known to take longer than the copies (kernels_dominate).
  bool kernel_bound = false;
  // A captured graph, replayed: no host work per chunk.
  bool replayed = false;
  // More than one compute stream: neighbouring chunks' kernels may run at once.
  bool kernels_overlap = false;
};

// Whether a run's kernels are what it waits on: the kernels (the union of
// their intervals, or the model's kernel time) took a quarter longer than the
// copies of the busier direction. The margin keeps work near the line from
// changing its chunks from one learning to the next.
bool kernels_dominate(double kernel_ms, double h2d_ms, double d2h_ms);

// The chunks for `item_count` items of `widest_item_bytes`. Kernel-bound
// runs (never one the host copies both ways, where the host is what the run
// waits on) ramp up from 512 KiB, or from a sixteenth of the chunk where
// replayed; where their kernels overlap and the usual chunk is 2 MiB or
// less, every chunk is 512 KiB instead.
Chunking default_chunking(std::size_t item_count, std::size_t widest_item_bytes, RunFacts run = {});

// Whether these options leave the chunks to the pipeline, so a run's
// kernels may change them (adapt_chunks on, no chunk size or first chunk
// set, the ramp not refused).
bool may_adapt_chunks(const PipelineOptions& options);

// The plan a pipeline with these options cuts `item_count` items into. A
// chunk size set in the options means chunks of that size, ramped only when
// first_chunk_items is set too; `run.kernel_bound` counts only where
// may_adapt_chunks(options), and `run.kernels_overlap` is the options' (more
// than one compute stream), whatever the caller set.
ChunkPlan plan_chunks(const PipelineOptions& options, std::size_t item_count, std::size_t widest_item_bytes,
                      RunFacts run = {});

}  // namespace sluice
