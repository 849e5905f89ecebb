#pragma once
// What a host executor's pipelines share, as a GPU's share the device: the
// memory it counts as page-locked or as device memory, the faults waiting
// to fire, the edges it leaves out, and the violations it has seen.
// Host-only.
#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sluice/bound/bound.hpp"
#include "sluice/core/pointer_query.hpp"
#include "sluice/pipeline/host_executor.hpp"

namespace sluice::detail {

class HostDevice {
 public:
  explicit HostDevice(HostExecutorOptions options) : options_(options) {}
  const HostExecutorOptions& options() const { return options_; }

  // Memory.
  std::byte* allocate(std::size_t bytes, MemoryKind kind);  // pinned or device; throws HostExecutorError
  void free(std::byte* data);
  // Locks [data, data + bytes) page by page, leaving out pages that are locked already.
  // Returns the start of what it locked (nullptr: nothing), for unlock().
  const void* lock(const void* data, std::size_t bytes);
  void unlock(const void* start);
  std::vector<MemoryExtent> extents(const void* data, std::size_t bytes) const;
  std::size_t free_device_bytes() const;
  // Whether [data, data + bytes) lies inside one range of device memory
  // (`device`), or of page-locked host memory: what a copy engine reaches.
  bool within(const void* data, std::size_t bytes, bool device) const;

  // Faults: the next matching fault, taken off the list.
  std::optional<InjectedFault> take_fault(OpRef at, InjectedFault::Kind kind);
  // The next fault of a kind that fires at no operation (allocation, rates).
  bool take_fault(InjectedFault::Kind kind);
  void add_fault(InjectedFault fault);
  void clear_faults();

  void set_edge_filter(EdgeFilter keep);
  bool keeps(const Op& op, const Edge& edge) const;

  void violation(std::string what);
  std::vector<std::string> violations() const;
  void count_checked() { checked_.fetch_add(1, std::memory_order_relaxed); }
  std::size_t checked() const { return checked_.load(); }
  void lanes_started(std::size_t n) { lane_threads_ += n; }
  void lanes_stopped(std::size_t n) { lane_threads_ -= n; }

  HostExecutor::Holdings holdings() const;

  // The engines' rates for a bound: none known on the host, unless a fault
  // makes the measurement fail (HostExecutorError).
  std::optional<EngineRates> rates();

 private:
  struct Range {
    std::size_t bytes = 0;
    MemoryKind kind = MemoryKind::pageable;
  };
  // The range holding `p`, if any.
  std::map<const std::byte*, Range>::const_iterator find(const std::byte* p) const;

  HostExecutorOptions options_;
  mutable std::mutex mutex_;
  std::map<const std::byte*, Range> ranges_;  // by start: pinned, registered and device memory
  std::size_t device_used_ = 0;
  std::vector<InjectedFault> faults_;
  EdgeFilter keep_;
  std::vector<std::string> violations_;
  std::atomic<std::size_t> checked_{0};
  std::atomic<std::size_t> lane_threads_{0};
};

}  // namespace sluice::detail
