// The prefetcher for batches of any shape (sluice::ring::BatchPrefetcher) as
// the module's _Prefetcher: sluice/prefetch.py walks the caller's iterable on
// a thread of its own and puts each batch's leaves here; the training loop
// takes each batch as one block of device memory. On device -1 it runs on the
// host ring executor, so that its Python side is tested where there is no GPU.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
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

struct PyPrefetcher {
  PyPrefetcher(int device, std::size_t ahead, std::size_t held, unsigned threads, unsigned jitter_us, std::uint64_t seed)
      : device(device) {
    if (device >= 0)
      executor = std::make_unique<ring::CudaRingExecutor>(device);
    else
      executor = std::make_unique<ring::HostRingExecutor>(ring::HostRingOptions{jitter_us, seed});
    prefetcher = std::make_unique<BatchPrefetcher>(*executor, ring::PrefetchOptions{ahead, held, threads});
  }
  ~PyPrefetcher() {
    py::gil_scoped_release release;  // the producer may need the GIL to see that it is stopped
    prefetcher.reset();
    executor.reset();
  }

  int device;
  std::unique_ptr<ring::RingExecutor> executor;
  std::unique_ptr<BatchPrefetcher> prefetcher;
};

using Leaf = std::tuple<std::uintptr_t, std::size_t, bool>;  // address, bytes, page-locked

}  // namespace

void bind_prefetcher(py::module_& m) {
  py::class_<BatchMemory>(m, "_BatchMemory");
  py::class_<PyPrefetcher>(m, "_Prefetcher")
      .def(py::init<int, std::size_t, std::size_t, unsigned, unsigned, std::uint64_t>(), py::arg("device"),
           py::arg("ahead"), py::arg("held"), py::arg("threads"), py::arg("jitter_us") = 0, py::arg("seed") = 1)
      .def("put",
           [](PyPrefetcher& p, const std::vector<Leaf>& leaves) {
             std::vector<ring::HostPiece> pieces;
             pieces.reserve(leaves.size());
             for (const auto& [address, bytes, page_locked] : leaves)
               pieces.push_back({reinterpret_cast<const std::byte*>(address), bytes, page_locked});
             // Staging runs without the GIL: the caller holds the batch's arrays until put() returns.
             py::gil_scoped_release release;
             return p.prefetcher->put(pieces);
           })
      .def("close", [](PyPrefetcher& p) { p.prefetcher->close(); })
      .def("fail", [](PyPrefetcher& p, const std::string& what) { p.prefetcher->fail(what); })
      .def("copied", [](PyPrefetcher& p, std::size_t position) { return p.prefetcher->copied(position); })
      .def("keep", [](PyPrefetcher& p, std::size_t position) { p.prefetcher->keep(position); })
      .def("stop",
           [](PyPrefetcher& p) {
             py::gil_scoped_release release;
             p.prefetcher->stop();
           })
      .def("take",
           [](PyPrefetcher& p, std::uintptr_t stream) -> py::object {
             // Waits in slices, so that Ctrl-C reaches a loop waiting for its next batch.
             for (;;) {
               bool ready = false;
               {
                 py::gil_scoped_release release;
                 ready = p.prefetcher->ready_within(std::chrono::milliseconds(50));
               }
               if (ready) break;
               if (PyErr_CheckSignals() != 0) throw py::error_already_set();
             }
             std::optional<BatchPrefetcher::Batch> b;
             {
               py::gil_scoped_release release;
               b = p.prefetcher->next(ring::ConsumerLane{reinterpret_cast<void*>(stream)});
               // On the host executor the loop reads the batch on this thread, not on
               // the consumer's lane: it waits here for the lane to have taken it.
               if (b && p.device < 0) p.executor->host_wait({b->position, ring::Step::take});
             }
             if (!b) return py::none();
             py::object owner = py::cast(BatchMemory{b->memory});
             const std::vector<std::int64_t> shape{static_cast<std::int64_t>(b->bytes)};
             const DLDataType u8{1, 8, 1};
             return py::make_tuple(b->position, device_capsule(b->data, p.device, shape, u8, owner), b->offsets, owner);
           })
      .def_property_readonly("device", [](const PyPrefetcher& p) { return p.device; });
  // The engines a prefetcher's copies run on, each at its best, measured now:
  // the bound its benchmark holds it to.
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
