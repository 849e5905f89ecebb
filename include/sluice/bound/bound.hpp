#pragma once
// The bound every sluice figure is judged against (docs/design.md):
//
//   bound = max(T_h2d, T_kernel, T_d2h, T_link(bytes_h2d, bytes_d2h),
//               bytes_staged / rate_host_copy, T_host_memory,
//               bytes_read / rate_storage_read, bytes_written / rate_storage_write)
//
// T_link is the link with both directions busy at once, at the run's own mix
// of bytes (link_ms below). T_host_memory is host staging and the copy
// engines together: both read and write host memory, so neither keeps its
// rate alone while the other runs (host_memory_ms below).
//
// Each term is one engine at its best, measured independently of the
// pipeline's own configuration (chunk size, depth, streams): link rates from
// large transfers, the kernel over the same data back to back, the host copy
// rate with as many threads as help, storage on the same file system. Fill
// and drain are not in the bound: they are the pipeline's cost to shrink.
// efficiency = bound / measured; above 1 means a term was measured wrong.
// Host-only.
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// What the link did with both directions at once and unequal bytes: each
// direction's bytes over the time until both had finished, in GB/s.
struct LinkPoint {
  double h2d_gbps = 0;
  double d2h_gbps = 0;
  bool known() const { return h2d_gbps > 0 && d2h_gbps > 0; }
};

// Host staging and the link at once, sharing host memory: the staging
// threads' rate (both directions, bytes of both counted) while the copy
// engines streamed both ways at `link_gbps` (bytes of both counted).
struct SharedHostPoint {
  double stage_gbps = 0;
  double link_gbps = 0;
  bool known() const { return stage_gbps > 0 && link_gbps > 0; }
};

// Engine rates in GB/s (10^9 bytes/s); 0 means unknown, and that term is left out.
struct EngineRates {
  double h2d_gbps = 0;        // pinned host -> device, alone
  double d2h_gbps = 0;        // device -> pinned host, alone
  double both_gbps = 0;       // both directions at once, equal bytes, bytes of both counted
  LinkPoint h2d_heavy;        // both at once, twice the bytes host -> device
  LinkPoint d2h_heavy;        // both at once, twice the bytes device -> host
  double stage_in_gbps = 0;   // host copy pageable -> pinned, all staging threads
  double stage_out_gbps = 0;  // host copy pinned -> pageable, all staging threads
  double stage_both_gbps = 0; // both staging directions at once, bytes of both counted
  SharedHostPoint staging_beside_link;  // both staging directions while the link streams both ways
  double read_gbps = 0;       // storage read (the source's file system, page cache included)
  double write_gbps = 0;      // storage write
};

// What a run moves through each engine.
struct RunVolume {
  double h2d_bytes = 0;
  double d2h_bytes = 0;
  double staged_in_bytes = 0;   // pageable memory copied into pinned slots by the host
  double staged_out_bytes = 0;  // pinned slots copied out to pageable memory by the host
  double read_bytes = 0;        // read from storage straight into pinned slots
  double written_bytes = 0;     // written to storage straight from pinned slots
  double kernel_ms = 0;         // the compute alone over all the data; 0 when unknown
};

// The terms' names, as reports print them.
namespace term {
inline constexpr std::string_view h2d = "h2d";
inline constexpr std::string_view kernel = "kernel";
inline constexpr std::string_view d2h = "d2h";
inline constexpr std::string_view link_both = "link (both directions)";
inline constexpr std::string_view host_staging = "host staging";
inline constexpr std::string_view host_memory = "host memory (staging beside the link)";
inline constexpr std::string_view storage_read = "storage read";
inline constexpr std::string_view storage_write = "storage write";
}  // namespace term

struct BoundTerm {
  std::string name;  // one of term::
  double ms = 0;
};

struct Bound {
  double ms = 0;
  std::string limiter;           // the name of the largest term
  std::vector<BoundTerm> terms;  // every term that could be computed, largest first
  // Set by the host or its storage rather than the GPU and its link.
  bool host_limited() const {
    return limiter == term::host_staging || limiter == term::host_memory || limiter == term::storage_read ||
           limiter == term::storage_write;
  }
};

// The link moving `h2d_bytes` and `d2h_bytes` at once, in ms. With the
// unequal mixes measured, the time at any mix follows from the measured
// points (alone each way, 2:1, 1:1, 1:2) and time sharing between them: the
// link's capacity is their convex hull. The link does not split itself as
// the single-direction rates and the both-ways total would allow: at 2:1 on
// PCIe Gen5 the H2D copy gets ~53 GB/s beside the D2H, not the 55 it gets
// alone. Without the mixes, the older outer limit: the largest of each
// direction alone and both bytes over the both-ways rate. 0 when no rate is known.
double link_ms(double h2d_bytes, double d2h_bytes, const EngineRates& rates);

// Host staging alone, in ms: staged bytes over the host's copy rates (one
// pool of threads serves both directions, so when both stage their bytes
// share the both-directions rate). 0 when nothing is staged or no rate is known.
double staging_ms(const RunVolume& volume, const EngineRates& rates);

// Host staging and the link's copies of a run together, in ms. Three
// measured points bound what host memory serves at once: staging alone (at
// the run's own mix of directions), the link alone (link_ms), and staging
// beside the link streaming both ways (rates.staging_beside_link, its link
// side no less than the link's best both ways); as for the link, time
// sharing between them makes their convex hull reachable, and the term is
// the time at the run's ratio of staged to copied bytes on that hull.
// Measured on the H200's host: staging 74-88 GB/s alone, 44-54 beside the
// link, so a staged run cannot have both at their best. 0 when nothing is
// staged, nothing is copied, or the shared point is unknown.
double host_memory_ms(const RunVolume& volume, const EngineRates& rates);

// Throws std::invalid_argument on negative volumes or rates.
Bound compute_bound(const RunVolume& volume, const EngineRates& rates);

// bound / measured, in (0, ~1]; 0 when measured is not positive.
constexpr double efficiency(double bound_ms, double measured_ms) {
  return measured_ms > 0 ? bound_ms / measured_ms : 0.0;
}

}  // namespace sluice
