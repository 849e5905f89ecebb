#pragma once
// The host executor: a pipeline's schedule run on host threads over host
// memory, with a host compute callable, so that pipeline code runs, and is
// tested, where there is no GPU. Host-only.
//
//   sluice::HostExecutor host;
//   sluice::Pipeline p(options, host);
//   auto x = p.input(in);
//   auto y = p.output(out);
//   p.compute([=](const sluice::Chunk& c) {           // runs on the compute lane's thread
//     for (std::size_t i = 0; i < c.size(); ++i) c[y][i] = 2 * c[x][i];
//   });
//   p.run();
//
// It runs the same schedule, driver and drain as the GPU: its "device" is
// host memory, its copy engines and compute streams are threads (so H2D,
// compute and D2H really overlap), and memory is page-locked in its own
// view (allocate_pinned, register_memory), so pinned, staged and registered
// spans take the paths they take on a GPU. As each operation starts it
// checks the schedule: everything the operation waits on has finished, no
// slot is written while an operation that uses its previous contents is
// pending, and copies touch only memory a copy engine could reach. A run
// that breaks one fails, and violations() says how. It can inject a
// failure at any operation, and pause at random before each one, so that
// the lanes meet in different orders from run to run.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "sluice/pipeline/schedule.hpp"

namespace sluice {

class Pipeline;
class MultiPipeline;
namespace detail {
class HostDevice;
}

struct HostExecutorOptions {
  // Each operation waits a random 0..jitter_us microseconds before it starts.
  unsigned jitter_us = 0;
  std::uint64_t seed = 1;
  // The "device memory" its slots may take; refusals past it are as a GPU's.
  std::size_t device_bytes = std::size_t{1} << 30;
};

// A failure made to happen at one operation of the next run that reaches it.
struct InjectedFault {
  enum class Kind {
    submit,      // submitting the operation fails at once (a launch or copy the runtime refuses)
    execution,   // the operation fails as it runs (a faulting kernel, a failed copy): every later one fails too
    allocation,  // the next allocation of slot memory fails (`at` is not used)
    // The next measurement of the engines' rates for RunReport::bound fails,
    // as a GPU's does when the probe finds no device memory free (`at` is
    // not used). Without one, the host executor knows no rates: no bound.
    rates,
  };
  Kind kind = Kind::execution;
  OpRef at;
};

// What a host executor's failures throw.
class HostExecutorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class HostExecutor {
 public:
  explicit HostExecutor(HostExecutorOptions options = {});

  // Host memory that this executor counts as page-locked, as cudaMallocHost's is. Move-only.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&&) noexcept;
    Buffer& operator=(Buffer&&) noexcept;
    ~Buffer();
    std::byte* data() const { return data_; }
    std::size_t bytes() const { return bytes_; }
    template <typename T>
    std::span<T> as() const {
      return {reinterpret_cast<T*>(data_), bytes_ / sizeof(T)};
    }

   private:
    friend class HostExecutor;
    std::shared_ptr<detail::HostDevice> device_;
    std::byte* data_ = nullptr;
    std::size_t bytes_ = 0;
  };
  Buffer allocate_pinned(std::size_t bytes);

  // [data, data + bytes) page-locked in this executor's view, as
  // sluice::HostRegistration does on a GPU, until the returned object goes. Move-only.
  class Registration {
   public:
    Registration() = default;
    Registration(Registration&&) noexcept;
    Registration& operator=(Registration&&) noexcept;
    ~Registration();

   private:
    friend class HostExecutor;
    std::shared_ptr<detail::HostDevice> device_;
    const void* data_ = nullptr;
  };
  Registration register_memory(const void* data, std::size_t bytes);

  // Each fault fires once, in the first run that reaches its operation.
  void inject(InjectedFault fault);
  void clear_faults();
  // The driver and the lanes wait only for the edges `keep` accepts (the
  // drain still waits for each chunk's D2H: that is where it learns how the
  // chunk went); the checks still hold every operation to the whole
  // schedule. Shows what each edge guards.
  void ignore_edges(EdgeFilter keep);

  // What it holds now, for leak checks: slot memory, page-locked ranges, lane threads.
  struct Holdings {
    std::size_t device_bytes = 0;
    std::size_t pinned_bytes = 0;
    std::size_t locked_ranges = 0;
    std::size_t lane_threads = 0;
  };
  Holdings holdings() const;
  // Whether the byte at `at` is page-locked in this executor's view (pinned or registered).
  bool page_locked(const void* at) const;
  // Every violation of the schedule seen so far, one line each.
  std::vector<std::string> violations() const;
  // Operations checked as they started, over every run.
  std::size_t operations_checked() const;


 private:
  friend class Pipeline;
  friend class MultiPipeline;
  std::shared_ptr<detail::HostDevice> device_;
};

}  // namespace sluice
