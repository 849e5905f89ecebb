#pragma once
// How a Pipeline runs. Every field has a default that needs no thought;
// `sluice tune` shows what the defaults give against a sweep. Host-only.
#include <cstddef>
#include <optional>

namespace sluice {

// What the pipeline does with pageable spans (std::vector, new[], mmap).
// Memory the caller lends is never left page-locked once a run returns: the
// caller may free it then, and a page-locking the pipeline kept would make
// later copies from those addresses (sluice's or any library's) read the old
// pages. Memory streamed again and again is best page-locked by the caller,
// who then decides how long: hold a sluice::HostRegistration over it and the
// pipeline copies it directly.
enum class HostMemoryPolicy {
  // Copy each chunk through pinned staging slots with the staging threads.
  // Costs host memory bandwidth, changes nothing about the caller's memory.
  stage,
  // Page-lock the spans (cudaHostRegister) for the run, before its first
  // chunk, and undo it when the run ends; the copy engines read and write
  // them directly. Only the whole pages inside a span are locked (the first
  // and last pages of unaligned memory hold other memory, which must not
  // look page-locked): the sub-page ends, and a span under a page, go
  // through a small pinned buffer instead. Registration costs about 40 ms per GiB on 4 KiB pages
  // (~20 ms on huge pages), every run: worth it for one long pass over
  // memory that staging would copy twice. Throws before any work when the
  // memory cannot be registered.
  register_memory,
  // Stage. Spans whose memory the pipeline itself keeps alive (arrays given
  // from Python) are page-locked in the background once their first run is
  // over, and copied directly from then on, until clear_spans(), rebind() of
  // that span or the pipeline's end; a run that starts while the locking is
  // still going waits for it (locking during a run would stall the run's own
  // CUDA calls). Spans larger than a quarter of physical memory are only staged.
  automatic,
};
// Whether a chunk's kernel needs the kernels of the chunks before it.
enum class KernelOrder {
  // Kernels run one after another in chunk order, on one compute stream: what
  // a running sum, a scan's carry or any chunk-to-chunk state needs. The
  // default, because the pipeline cannot see what a kernel does.
  in_chunk_order,
  // Each chunk's kernel reads and writes only its own chunk's data. Kernels of
  // neighbouring chunks may then overlap, so one starts in the SMs the tail of
  // the previous leaves idle: 3-5 % faster on compute-bound kernels (sincos
  // over 256 MiB on an H200), the same on copy-bound ones.
  independent,
};

struct PipelineOptions {
  // The GPU to run on; unset, the device current when the pipeline is built.
  // The caller's current device is left as it was by every call.
  std::optional<int> device;
  // Items in the largest chunk; 0 picks sizes from the data, from whether the
  // host copies it through the slots both ways this run (default_chunking),
  // and from what the first run learnt of the kernels (adapt_chunks).
  // A size set here cuts every chunk that size, unless first_chunk_items is set too.
  std::size_t chunk_items = 0;
  // With chunk_items and first_chunk_items 0 and ramp on: the first run whose
  // chunks the answer would change times its stages (a few microseconds per
  // chunk, that run only), and when its kernels took a quarter longer than
  // its copies, later runs start and end with 512 KiB chunks ramping up to
  // the usual size, so the SMs wait less for the first chunk in and the last
  // chunk out (with kernels that may overlap and up to 16 MiB of data, every
  // chunk is 512 KiB; src/pipeline/chunking.hpp says what each gains). The run that
  // learns says so in its notes; a new compute callable learns again, a
  // rebind() keeps what was learnt. A replayed pipeline (Replay::graph)
  // learns from its first run, captured with timing marks, and ramps from a
  // sixteenth of the chunk; runs the host copies both ways (staged) keep
  // the usual sizes.
  bool adapt_chunks = true;
  // When set, the first and last chunks ramp up from this size by doubling
  // to chunk_items (and back down at the end), so the first kernel starts
  // sooner; 0: no ramp unless the kernels dominate (adapt_chunks;
  // src/pipeline/chunking.hpp says why).
  // `ramp = false` cuts every chunk the same size whatever is set here.
  std::size_t first_chunk_items = 0;
  bool ramp = true;
  // Device slots per span (>= 1): how many chunks can be on the device at once.
  std::size_t depth = 4;
  // What the kernels allow; the one fact about the work the pipeline cannot
  // measure, so the caller states it. Nothing else needs choosing.
  KernelOrder kernel_order = KernelOrder::in_chunk_order;
  // Compute streams the chunks take turns over. 0 (the default): one for
  // in_chunk_order, two for independent kernels (compute_stream_count()).
  // More than one with in_chunk_order is refused: kernels would run out of order.
  unsigned compute_streams = 0;
  // Host threads that stage pageable spans and serve sources and sinks; 0:
  // two fewer than the hardware threads.
  unsigned staging_threads = 0;
  HostMemoryPolicy host_memory = HostMemoryPolicy::automatic;
  // CUDA stream priority of the pipeline's streams (lower is more urgent).
  int priority = 0;
  // Keep every chunk's stage intervals in the report (a timeline).
  bool record = false;
  // Fill RunReport::bound: link and host copy rates are measured once per
  // device and process (about 0.1 s the first time) and the kernel time is
  // the run's own compute intervals.
  bool report_bound = false;
};

// The compute streams `options` give a pipeline. Throws std::invalid_argument
// when more than one is asked for kernels that must run in chunk order.
unsigned compute_stream_count(const PipelineOptions& options);

}  // namespace sluice
