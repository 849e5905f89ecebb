// The training loaders and the plan of their batches. The plan is host-only:
// it works, and is tested, with no GPU.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "bindings.hpp"
#include "dlpack.hpp"
#include "options.hpp"
#include "sluice/core/error.hpp"
#include "sluice/loader/batch_plan.hpp"
#include "sluice/loader/prefetcher.hpp"
#include "sluice/loader/token_shard.hpp"
#include "sluice/loader/token_windows.hpp"

namespace py = pybind11;

namespace sluice::python {

namespace {

py::tuple state_tuple(LoaderState s) { return py::make_tuple(s.epoch, s.sample); }

py::tuple token_batch(const TokenBatch& b, int device, py::object owner) {
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(b.rows), static_cast<std::int64_t>(b.seq)};
  const DLDataType i32{0, 32, 1};
  return py::make_tuple(device_capsule(const_cast<std::int32_t*>(b.inputs.data()), device, shape, i32, owner),
                        device_capsule(const_cast<std::int32_t*>(b.targets.data()), device, shape, i32, owner),
                        b.position.epoch, b.position.sample, b.last_of_epoch);
}

py::dict idle_dict(const IdleReport& r) {
  py::dict d;
  d["steps"] = r.steps;
  d["fill_ms"] = r.fill_ms;
  d["waited_ms"] = r.waited_ms;
  d["loop_ms"] = r.loop_ms;
  d["idle_fraction"] = r.idle_fraction();
  return d;
}

// A loader and the device it runs on, as one Python object.
struct PyTokenLoader {
  TokenLoader loader;
  int device;
};

void bind_batch_plan(py::module_& m) {
  py::class_<BatchPlan>(m, "_BatchPlan")
      .def(py::init([](std::size_t items, std::size_t batch, bool shuffle, std::uint64_t seed, std::size_t rank,
                       std::size_t world, bool drop_last) {
             return BatchPlan(items, {batch, shuffle, seed, rank, world, drop_last});
           }),
           py::arg("items"), py::arg("batch"), py::arg("shuffle"), py::arg("seed"), py::arg("rank"), py::arg("world"),
           py::arg("drop_last"))
      .def_property_readonly("items", &BatchPlan::items)
      .def_property_readonly("global_batch", &BatchPlan::global_batch)
      .def_property_readonly("batches_per_epoch", &BatchPlan::batches_per_epoch)
      .def("batches_left", [](const BatchPlan& p, std::uint64_t epoch, std::size_t sample) { return p.batches_left({epoch, sample}); })
      .def("resume_at", [](const BatchPlan& p, std::uint64_t epoch, std::size_t sample) { return state_tuple(p.resume_at({epoch, sample})); })
      .def("next", [](const BatchPlan& p, std::uint64_t epoch, std::size_t sample) { return state_tuple(p.next({epoch, sample})); })
      .def("last_of_epoch", [](const BatchPlan& p, std::uint64_t epoch, std::size_t sample) { return p.last_of_epoch({epoch, sample}); })
      .def("batch_items", [](const BatchPlan& p, std::uint64_t epoch, std::size_t sample) {
        const LoaderState at{epoch, sample};
        std::vector<std::size_t> items(p.batch_rows(at));
        for (std::size_t r = 0; r < items.size(); ++r) items[r] = p.item(at, r);
        return items;
      });
  m.def("count_windows", [](const std::vector<std::string>& files, std::size_t seq) {
    return TokenWindows(open_shards(files), seq).count();
  });
}

void bind_token_loader(py::module_& m) {
  py::class_<PyTokenLoader>(m, "_TokenLoader")
      .def(py::init([](const std::vector<std::string>& files, std::size_t seq, std::uint64_t epoch, std::size_t sample,
                       const py::kwargs& options) {
             LoaderOptions o = loader_table().fill(options);
             o.start = {epoch, sample};
             const std::optional<int> device = o.device;
             // The shards and the plan are checked before the device is touched.
             TokenLoader loader(files, seq, o);
             int current = 0;
             if (!device) SLUICE_CUDA_CHECK(cudaGetDevice(&current));
             return std::make_unique<PyTokenLoader>(PyTokenLoader{std::move(loader), device.value_or(current)});
           }),
           py::arg("files"), py::arg("seq"), py::arg("epoch"), py::arg("sample"),
           "the loader's options by name (loader_options())")
      .def("next",
           [](py::object self, std::uintptr_t stream) {
             auto& l = self.cast<PyTokenLoader&>();
             TokenBatch b;
             {
               py::gil_scoped_release release;  // waits on the reader thread at most, never on the device
               b = l.loader.next(StreamView(reinterpret_cast<cudaStream_t>(stream)));
             }
             return token_batch(b, l.device, self);
           })
      .def("state", [](const PyTokenLoader& l) { return state_tuple(l.loader.state()); })
      .def("idle", [](const PyTokenLoader& l) {
        py::gil_scoped_release release;
        const IdleReport r = l.loader.idle();
        py::gil_scoped_acquire gil;
        return idle_dict(r);
      })
      .def_property_readonly("device", [](const PyTokenLoader& l) { return l.device; })
      .def_property_readonly("batches_per_epoch", [](const PyTokenLoader& l) { return l.loader.batches_per_epoch(); })
      .def_property_readonly("global_batch", [](const PyTokenLoader& l) { return l.loader.plan().global_batch(); })
      .def_property_readonly("windows", [](const PyTokenLoader& l) { return l.loader.windows(); });
}

}  // namespace

void bind_loaders(py::module_& m) {
  bind_batch_plan(m);
  bind_token_loader(m);
}

}  // namespace sluice::python
