// Device memory copied into the caller's page-locked host memory, each copy
// after the work enqueued so far on the caller's stream, on a ring to the host
// (ring/to_host_ring.hpp): the streamed gradients (sluice/streamed_training.py).
// The caller keeps a copy's device memory until its position is drained, and
// waits for a position before it reads the host memory. On device -1 the ring
// runs on the host executor over host memory, checking every edge as each
// copy starts (what CI tests without a GPU).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "ring/cuda_ring_executor.hpp"
#include "ring/host_ring_executor.hpp"
#include "ring/to_host_ring.hpp"

namespace py = pybind11;

namespace sluice::python {

namespace {

class CopiesToHost {
 public:
  CopiesToHost(int device, std::size_t ahead) {
    if (device < 0) {
      auto host = std::make_unique<ring::HostRingExecutor>();
      host_ = host.get();
      executor_ = std::move(host);
    } else {
      // The drainer sleeps on each copy: the backward's threads keep the cores.
      executor_ = std::make_unique<ring::CudaRingExecutor>(device, 0, ring::StagingWait::sleep);
    }
    ring::RingOptions o;
    o.items = ring::RingOptions::unbounded;
    o.direction = ring::Direction::to_host;
    o.ahead = ahead;
    o.staged = false;
    ring_ = std::make_unique<ring::ToHostRing>(ring::RingPlan(o), *executor_);
  }
  ~CopiesToHost() { stop(); }

  std::size_t put(std::uintptr_t stream, std::uintptr_t from, std::size_t bytes, std::uintptr_t to) {
    return ring_->put({0, {{reinterpret_cast<const std::byte*>(from), 0, bytes, reinterpret_cast<std::byte*>(to)}}, {}},
                      {reinterpret_cast<void*>(stream)});
  }
  void wait(std::size_t position) { ring_->wait_drained(position); }
  std::size_t drained() const { return ring_->drained(); }
  void finish() { ring_->finish(); }
  void stop() noexcept {
    if (ring_) ring_->stop();
  }
  // The host executor's checks: the edges each copy started before (none where the ring keeps them).
  std::vector<std::string> violations() const { return host_ ? host_->violations() : std::vector<std::string>{}; }
  std::size_t checked() const { return host_ ? host_->operations_checked() : 0; }

 private:
  std::unique_ptr<ring::RingExecutor> executor_;
  ring::HostRingExecutor* host_ = nullptr;
  std::unique_ptr<ring::ToHostRing> ring_;  // after the executor it runs on
};

}  // namespace

void bind_copies_to_host(py::module_& m) {
  py::class_<CopiesToHost>(m, "_CopiesToHost")
      .def(py::init<int, std::size_t>(), py::arg("device"), py::arg("ahead"))
      // `from`: `bytes` of device memory the caller keeps until the copy's position is drained;
      // `to`: page-locked host memory it keeps until then too. Waits (the host) while `ahead`
      // copies are not drained. The position.
      .def(
          "put",
          [](CopiesToHost& c, std::uintptr_t stream, std::uintptr_t from, std::size_t bytes, std::uintptr_t to) {
            py::gil_scoped_release release;
            return c.put(stream, from, bytes, to);
          },
          py::arg("stream"), py::arg("source"), py::arg("bytes"), py::arg("to"))
      // Returns once the copy of `position` is in the host memory; raises for a failed copy.
      .def(
          "wait",
          [](CopiesToHost& c, std::size_t position) {
            py::gil_scoped_release release;
            c.wait(position);
          },
          py::arg("position"))
      .def_property_readonly("drained", &CopiesToHost::drained)
      .def("finish",
           [](CopiesToHost& c) {
             py::gil_scoped_release release;
             c.finish();
           })
      .def("stop",
           [](CopiesToHost& c) {
             py::gil_scoped_release release;
             c.stop();
           })
      .def("_violations", &CopiesToHost::violations)
      .def("_checked", &CopiesToHost::checked);
}

}  // namespace sluice::python
