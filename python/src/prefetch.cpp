// The prefetcher for batches of any shape (sluice::ring::BatchPrefetcher) as
// the module's _Prefetcher: sluice/prefetch.py walks the caller's iterable on
// a thread of its own and puts each batch's leaves here; the training loop
// takes each batch as one block of device memory. On device -1 it runs on the
// host ring executor, so that its Python side is tested where there is no GPU.
#include <Python.h>
#include <cuda_runtime.h>
#include <unistd.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "bound/host_rates.hpp"
#include "bound/link_rates.hpp"
#include "bound/staging_rates.hpp"
#include "core/staging_pool.hpp"
#include "dlpack.hpp"
#include "ring/batch_prefetcher.hpp"
#include "ring/cuda_ring_executor.hpp"
#include "ring/host_ring_executor.hpp"
#include "ring/layer_steps.hpp"
#include "sluice/core/error.hpp"

namespace py = pybind11;

namespace sluice::python {

namespace {

using ring::BatchPrefetcher;

// A batch's device memory, as the owner of the tensors that view it: it
// lives as long as one of them does (the prefetcher only keeps a weak
// reference, to see whether the loop still holds the batch).
struct BatchMemory {
  std::shared_ptr<void> memory;
};

// The prefetcher and the thread that feeds it. The Python thread that walks
// the iterable hands each batch to that thread and goes on at once: staging
// runs with no GIL to take back after it, which a loop holding the GIL (torch
// launches) would otherwise make it wait for, up to Python's switch interval,
// at every batch. The batch's Python objects stay referenced until its pieces
// are staged (page-locked ones: copied); they are let go under the GIL, by
// the next put() or by stop().
class PyPrefetcher {
 public:
  PyPrefetcher(int device, std::size_t ahead, std::size_t held, unsigned threads, std::size_t staging, unsigned jitter_us,
               std::uint64_t seed, std::optional<std::size_t> fail_stage_at)
      : device_(device) {
    if (device >= 0) {
      executor_ = std::make_unique<ring::CudaRingExecutor>(device);
    } else {
      auto host = std::make_unique<ring::HostRingExecutor>(ring::HostRingOptions{jitter_us, seed});
      if (fail_stage_at) host->inject({{*fail_stage_at, ring::Step::stage}});
      executor_ = std::move(host);
    }
    prefetcher_ = std::make_unique<BatchPrefetcher>(*executor_, ring::PrefetchOptions{ahead, held, threads, staging});
    feeder_ = std::thread([this] { feed(); });
  }
  ~PyPrefetcher() {
    // A DataLoader's worker is a fork of this process that may collect this
    // object: there the threads and the CUDA context are not its own, and
    // stopping would touch them. The child lets them go untouched.
    if (getpid() != made_in_) {
      (void)prefetcher_.release();
      (void)executor_.release();
      feeder_.detach();
      return;
    }
    stop();
    prefetcher_.reset();
    executor_.reset();
  }
  PyPrefetcher(const PyPrefetcher&) = delete;
  PyPrefetcher& operator=(const PyPrefetcher&) = delete;

  int device() const { return device_; }
  BatchPrefetcher& prefetcher() { return *prefetcher_; }
  ring::RingExecutor& executor() { return *executor_; }

  // With the GIL: `keep` holds the pieces' memory. Returns the batch's position.
  std::size_t put(std::vector<ring::HostPiece> pieces, py::object keep, bool page_locked) {
    let_go_of_done();
    std::size_t position = 0;
    {
      py::gil_scoped_release release;
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || fed_all_ || queue_.size() < capacity_; });
      if (stopping_) throw std::logic_error("prefetcher: put() after stop()");
      position = queued_++;
      if (fed_all_) {
        // The feeder stopped at a batch that failed: take() of that batch
        // raises; this one is let go, not waited for.
        done_.push_back({position, keep.release().ptr(), false});
        return position;
      }
      queue_.push_back({Kind::batch, std::move(pieces), keep.release().ptr(), page_locked, {}});
    }
    changed_.notify_all();
    return position;
  }
  // With the GIL, which it lets go while it waits: returns once the batch at `position` is read
  // where it lies - staged into the ring's page-locked slot, or, page-locked, copied to the
  // device - or the prefetcher stopped or failed. A producer that refills the arrays it handed
  // over (one buffer, yielded again and again) may then write them.
  // Waits in slices of 50 ms, so that Ctrl-C reaches a loop whose own thread waits here.
  void wait_read(std::size_t position) {
    while (!read_within(position, std::chrono::milliseconds(50)))
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  void close() { enqueue({Kind::close, {}, nullptr, false, {}}); }
  void fail(std::string what) { enqueue({Kind::fail, {}, nullptr, false, std::move(what)}); }

  // With the GIL.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    {
      py::gil_scoped_release release;
      prefetcher_->stop();  // wakes the feeder waiting in put(); the copies finish
      if (feeder_.joinable()) feeder_.join();
    }
    std::vector<PyObject*> left;
    {
      std::lock_guard lock(mutex_);
      for (auto& w : queue_)
        if (w.keep) left.push_back(w.keep);
      queue_.clear();
      for (auto& d : done_) left.push_back(d.keep);
      done_.clear();
    }
    for (PyObject* o : left) Py_DECREF(o);
  }

 private:
  enum class Kind { batch, close, fail };
  struct Work {
    Kind kind;
    std::vector<ring::HostPiece> pieces;
    PyObject* keep;  // an owned reference, let go under the GIL
    bool page_locked;
    std::string what;
  };
  struct Done {
    std::size_t position;
    PyObject* keep;
    bool page_locked;
  };

  // wait_read's slice, without the GIL: whether the batch at `position` is read (or no longer will be).
  bool read_within(std::size_t position, std::chrono::milliseconds slice) {
    py::gil_scoped_release release;
    const auto until = std::chrono::steady_clock::now() + slice;
    std::unique_lock lock(mutex_);
    if (!changed_.wait_until(lock, until, [&] { return stopping_ || fed_all_ || fed_ > position; })) return false;
    if (stopping_ || fed_all_ || !fed_page_locked_.count(position)) return true;
    lock.unlock();
    // Read by the copy itself: the host polls the copy (no event to block on per position).
    for (auto nap = std::chrono::microseconds(20); !prefetcher_->copied(position);
         nap = std::min(nap * 2, std::chrono::microseconds(1000))) {
      if (std::chrono::steady_clock::now() >= until) return false;
      {
        std::lock_guard relock(mutex_);
        if (stopping_) return true;
      }
      std::this_thread::sleep_for(nap);
    }
    std::lock_guard relock(mutex_);
    fed_page_locked_.erase(position);
    return true;
  }

  void enqueue(Work w) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      queue_.push_back(std::move(w));
    }
    changed_.notify_all();
  }

  void feed() noexcept {
    std::size_t position = 0;
    for (;;) {
      Work w;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        w = std::move(queue_.front());
        queue_.pop_front();
      }
      changed_.notify_all();
      try {
        if (w.kind == Kind::close) {
          prefetcher_->close();
          return;
        }
        if (w.kind == Kind::fail) {
          prefetcher_->fail(w.what);
          return;
        }
        prefetcher_->put(w.pieces);
      } catch (const std::exception&) {
        // Stopped, or a staging failure that take() of this batch reports.
        {
          std::lock_guard lock(mutex_);
          done_.push_back({position, w.keep, false});
          fed_all_ = true;
        }
        changed_.notify_all();
        return;
      }
      {
        std::lock_guard lock(mutex_);
        if (w.page_locked) fed_page_locked_.insert(position);
        done_.push_back({position++, w.keep, w.page_locked});
        fed_ = position;
      }
      changed_.notify_all();
    }
  }

  // With the GIL: the batches whose pieces no copy reads any more.
  void let_go_of_done() {
    std::vector<PyObject*> gone;
    {
      std::lock_guard lock(mutex_);
      while (!done_.empty() && (!done_.front().page_locked || prefetcher_->copied(done_.front().position))) {
        gone.push_back(done_.front().keep);
        done_.pop_front();
      }
    }
    for (PyObject* o : gone) Py_DECREF(o);
  }

  pid_t made_in_ = getpid();
  int device_;
  // Batches waiting for the feeder: one is enough to free the Python thread
  // while the feeder stages the one before it.
  static constexpr std::size_t capacity_ = 1;
  std::unique_ptr<ring::RingExecutor> executor_;
  std::unique_ptr<BatchPrefetcher> prefetcher_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Work> queue_;
  std::deque<Done> done_;
  std::size_t queued_ = 0;
  std::size_t fed_ = 0;  // batches the feeder has put into the prefetcher (staged)
  std::set<std::size_t> fed_page_locked_;  // ... of which these hold page-locked pieces, until wait_read()
  bool stopping_ = false;
  bool fed_all_ = false;  // the feeder has stopped: a batch failed to stage
  std::thread feeder_;  // last: starts when everything above exists
};

// address, bytes, page-locked, and the file that also holds it (-1: none) at that offset
using Leaf = std::tuple<std::uintptr_t, std::size_t, bool, int, std::uint64_t>;

}  // namespace

void bind_prefetcher(py::module_& m) {
  py::class_<BatchMemory>(m, "_BatchMemory");
  py::class_<PyPrefetcher>(m, "_Prefetcher")
      .def(py::init<int, std::size_t, std::size_t, unsigned, std::size_t, unsigned, std::uint64_t,
                    std::optional<std::size_t>>(),
           py::arg("device"), py::arg("ahead"), py::arg("held"), py::arg("threads"), py::arg("staging") = BatchPrefetchOptions{}.staging,
           py::arg("jitter_us") = 0, py::arg("seed") = 1, py::arg("fail_stage_at") = py::none(),
           "device -1: the host ring executor (jitter_us, seed, and a stage made to fail at fail_stage_at), for tests")
      .def("put",
           [](PyPrefetcher& p, const std::vector<Leaf>& leaves, py::object keep) {
             std::vector<ring::HostPiece> pieces;
             pieces.reserve(leaves.size());
             bool page_locked = false;
             for (const auto& [address, bytes, locked, fd, fd_offset] : leaves) {
               pieces.push_back({reinterpret_cast<const std::byte*>(address), bytes, locked, fd, fd_offset});
               page_locked |= locked;
             }
             return p.put(std::move(pieces), std::move(keep), page_locked);
           },
           py::arg("leaves"), py::arg("keep"), "hands a batch over; `keep` holds its arrays until they are copied")
      .def("ready",
           [](PyPrefetcher& p, double seconds) {
             py::gil_scoped_release release;
             return p.prefetcher().ready_within(std::chrono::milliseconds(static_cast<long>(seconds * 1000)));
           },
           py::arg("seconds"), "whether take() would return without waiting for the producer, waiting up to `seconds`")
      .def("wait_read", &PyPrefetcher::wait_read, py::arg("position"),
           "waits until the batch at `position` is read where it lies (staged, or page-locked: copied)")
      .def("close", &PyPrefetcher::close)
      .def("fail", &PyPrefetcher::fail)
      .def("keep", [](PyPrefetcher& p, std::size_t position) { p.prefetcher().keep(position); })
      .def("stop", &PyPrefetcher::stop)
      .def("take",
           [](PyPrefetcher& p, std::uintptr_t stream) -> py::object {
             // Waits in slices, so that Ctrl-C reaches a loop waiting for its next batch.
             for (;;) {
               bool ready = false;
               {
                 py::gil_scoped_release release;
                 ready = p.prefetcher().ready_within(std::chrono::milliseconds(50));
               }
               if (ready) break;
               if (PyErr_CheckSignals() != 0) throw py::error_already_set();
             }
             std::optional<BatchPrefetcher::Batch> b;
             {
               py::gil_scoped_release release;
               b = p.prefetcher().next(ring::ConsumerLane{reinterpret_cast<void*>(stream)});
               // On the host executor the loop reads the batch on this thread, not on
               // the consumer's lane: it waits here for the lane to have taken it.
               if (b && p.device() < 0) p.executor().host_wait({b->position, ring::Step::take});
             }
             if (!b) return py::none();
             py::object owner = py::cast(BatchMemory{b->memory});
             const std::vector<std::int64_t> shape{static_cast<std::int64_t>(b->bytes)};
             const DLDataType u8{1, 8, 1};
             return py::make_tuple(b->position, device_capsule(b->data, p.device(), shape, u8, owner), b->offsets, owner);
           })
      .def_property_readonly("device", &PyPrefetcher::device);
  // The engines a prefetcher's copies run on, each at its best, measured now:
  // the bound its benchmark holds it to.
  // The device's default memory pool, where the ring's device slots live (cudaMallocAsync),
  // apart from torch's caching allocator: bytes in use and reserved, now and at their highest
  // since the last reset (reset=True sets both highs to the current values).
  m.def("_ring_pool_memory", [](int device, bool reset) {
    cudaMemPool_t pool = nullptr;
    SLUICE_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    auto get = [&](cudaMemPoolAttr attr) {
      std::uint64_t v = 0;
      SLUICE_CUDA_CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
      return v;
    };
    if (reset) {
      std::uint64_t zero = 0;
      SLUICE_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
      SLUICE_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
    }
    py::dict d;
    d["used"] = get(cudaMemPoolAttrUsedMemCurrent);
    d["used_high"] = get(cudaMemPoolAttrUsedMemHigh);
    d["reserved"] = get(cudaMemPoolAttrReservedMemCurrent);
    d["reserved_high"] = get(cudaMemPoolAttrReservedMemHigh);
    return d;
  }, py::arg("device"), py::arg("reset") = false);
  // A model's layers in the order a step runs them (ring/layer_steps.hpp), for StreamedLayers.
  m.def("_layer_step", [](std::size_t position, std::size_t layers, bool with_backward) {
    if (layers == 0 || layers > SIZE_MAX / 2) throw std::invalid_argument("_layer_step: layers must be 1 to SIZE_MAX / 2");
    const ring::LayerStep s = ring::layer_step(position, layers, with_backward);
    return py::make_tuple(s.pass, s.backward, s.layer);
  }, py::arg("position"), py::arg("layers"), py::arg("with_backward"), "(pass, backward, layer) at a position");
  m.def("_position_in_pass", &ring::position_in_pass, py::arg("layer"), py::arg("backward"), py::arg("layers"));
  m.def("_layer_positions", &ring::layer_positions, py::arg("layers"), py::arg("with_backward"));
  // The bytes of the block the prefetcher lays a batch of pieces of these sizes out in (lay_out,
  // at the prefetcher's alignment): a device slot's size, for callers that budget slots.
  m.def("_batch_bytes", [](const std::vector<std::size_t>& sizes) {
    std::vector<ring::HostPiece> pieces;
    for (std::size_t bytes : sizes) pieces.push_back({nullptr, bytes, false});
    return ring::lay_out(pieces, ring::PrefetchOptions{}.align).bytes;
  }, py::arg("sizes"));
  m.def("_engine_rates", [](int device, unsigned threads) {
    py::gil_scoped_release release;
    StagingPool pool(threads);
    const LinkRates link = measure_link_rates(device);
    const HostCopyRates staging = fastest_of(measure_staging_rates(device, pool), measure_host_copy_rates(pool));
    py::gil_scoped_acquire gil;
    py::dict d;
    d["h2d_gbps"] = link.h2d_gbps;
    d["staging_gbps"] = staging.stage_in_gbps;
    d["staging_threads"] = pool.thread_count();
    return d;
  }, py::arg("device"), py::arg("threads") = 0);
}

}  // namespace sluice::python
