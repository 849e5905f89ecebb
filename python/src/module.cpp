// sluice._sluice: the C++ library under `import sluice`. The Python package
// (python/sluice/__init__.py) turns arrays into spans and device memory into
// torch tensors; this module keeps to pointers, sizes and capsules.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "bindings.hpp"
#include "dlpack.hpp"
#include "errors.hpp"
#include "options.hpp"
#include "multigpu/multi_pipeline_access.hpp"
#include "pipeline/pipeline_access.hpp"
#include "core/page_lock_ledger.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/pointer_query.hpp"
#include "sluice/loader/token_shard.hpp"
#include "sluice/multigpu/multi_pipeline.hpp"
#include "sluice/pipeline/file_io.hpp"
#include "sluice/pipeline/pipeline.hpp"
#include "sluice/trace/trace.hpp"
#include "sluice/trace/trace_chrome.hpp"
#include "sluice/trace/trace_svg.hpp"

namespace py = pybind11;

namespace sluice {

namespace python {

std::shared_ptr<py::object> hold_with_gil(py::object o) {
  return {new py::object(std::move(o)), [](py::object* p) {
            py::gil_scoped_acquire gil;
            delete p;
          }};
}

namespace {

// The memory's owner as the pipeline holds it; none for None.
std::shared_ptr<const void> owner_of(py::object owner) {
  if (owner.is_none()) return nullptr;
  return hold_with_gil(std::move(owner));
}

// What the compute callable is given of a chunk, before the Python side makes tensors of it.
struct ChunkInfo {
  std::size_t index, count, begin, end;
  std::uintptr_t stream;
  std::vector<std::uintptr_t> slots;
};

ChunkInfo chunk_info(const Chunk& c) {
  ChunkInfo info{c.index, c.count, c.items.begin, c.items.end, reinterpret_cast<std::uintptr_t>(c.stream.get()), {}};
  for (const auto& slot : c.slots) info.slots.push_back(reinterpret_cast<std::uintptr_t>(slot.data));
  return info;
}

SpanRole role_of(const std::string& role) {
  if (role == "input") return SpanRole::input;
  if (role == "output") return SpanRole::output;
  if (role == "inout") return SpanRole::inout;
  throw std::invalid_argument("span role must be input, output or inout, not '" + role + "'");
}

py::dict bound_dict(const Bound& b) {
  py::dict terms;
  for (const auto& t : b.terms) terms[py::str(t.name)] = t.ms;
  py::dict d;
  d["ms"] = b.ms;
  d["limiter"] = b.limiter;
  d["terms"] = terms;
  return d;
}

// Item types are known only at run time here: every use of the pipelines'
// untyped entry points is in these three functions. `owner` (the array) is
// held by the span for as long as it refers to the memory, so the automatic
// policy may keep that memory page-locked between runs.
std::size_t add_span(Pipeline& p, std::uintptr_t data, std::size_t items, std::size_t item_bytes, const std::string& role,
                     py::object owner) {
  return detail::PipelineAccess::add_host(p, reinterpret_cast<const void*>(data), items, item_bytes, role_of(role),
                                          owner_of(std::move(owner)));
}
// `generation` and `role` are the handle's own (what add_span's pipeline said then), so a
// handle of another pipeline, or of spans cleared since, is refused by the pipeline itself.
void rebind_span(Pipeline& p, std::size_t span, std::uint64_t generation, const std::string& role, std::uintptr_t data,
                 std::size_t items, py::object owner) {
  detail::PipelineAccess::rebind_host(p, span, generation, reinterpret_cast<const void*>(data), items,
                                      role_of(role) != SpanRole::input, owner_of(std::move(owner)));
}
// The Python side holds a MultiPipeline's arrays for as long as it lives; its
// parts never page-lock them between runs, so `owner` is not needed here.
std::size_t add_span(MultiPipeline& p, std::uintptr_t data, std::size_t items, std::size_t item_bytes, const std::string& role,
                     py::object /*owner*/) {
  return detail::MultiPipelineAccess::add_host(p, reinterpret_cast<const void*>(data), items, item_bytes, role_of(role));
}

void bind_pipeline(py::module_& m) {
  py::class_<ChunkInfo>(m, "_ChunkInfo")
      .def_readonly("index", &ChunkInfo::index)
      .def_readonly("count", &ChunkInfo::count)
      .def_readonly("begin", &ChunkInfo::begin)
      .def_readonly("end", &ChunkInfo::end)
      .def_readonly("stream", &ChunkInfo::stream)
      .def_readonly("slots", &ChunkInfo::slots);

  py::class_<RunReport>(m, "RunReport", "What one pipeline run did: times, bytes, the bound and the timeline.")
      .def_readonly("item_count", &RunReport::item_count)
      .def_readonly("chunk_items", &RunReport::chunk_items)
      .def_readonly("chunk_count", &RunReport::chunk_count)
      .def_readonly("depth", &RunReport::depth)
      .def_readonly("wall_ms", &RunReport::wall_ms)
      .def_property_readonly("notes",
                             [](const RunReport& r) {
                               std::vector<std::string> notes;
                               for (const auto& n : r.notes) notes.push_back(in_python_words(n));
                               return notes;
                             })
      .def_property_readonly("bound", [](const RunReport& r) -> py::object {
        return r.bound ? py::object(bound_dict(*r.bound)) : py::object(py::none());
      })
      .def_property_readonly("efficiency", &RunReport::efficiency)
      .def_property_readonly("volume", [](const RunReport& r) {
        py::dict d;
        d["h2d_bytes"] = r.volume.h2d_bytes;
        d["d2h_bytes"] = r.volume.d2h_bytes;
        d["staged_in_bytes"] = r.volume.staged_in_bytes;
        d["staged_out_bytes"] = r.volume.staged_out_bytes;
        d["read_bytes"] = r.volume.read_bytes;
        d["written_bytes"] = r.volume.written_bytes;
        d["kernel_ms"] = r.volume.kernel_ms;
        return d;
      })
      .def_property_readonly("intervals", [](const RunReport& r) {
        py::list out;
        for (const auto& i : r.intervals)
          out.append(py::make_tuple(std::string(to_string(i.lane)), i.chunk, i.start_ms, i.end_ms, i.bytes, i.stream));
        return out;
      })
      .def("__repr__", [](const RunReport& r) {
        std::string text = "RunReport(" + std::to_string(r.chunk_count) + " chunks, " + std::to_string(r.wall_ms) + " ms";
        if (r.bound) text += ", bound " + std::to_string(r.bound->ms) + " ms (" + r.bound->limiter + ")";
        return text + ")";
      });

  py::class_<Pipeline>(m, "_Pipeline")
      .def(py::init([](const py::kwargs& options) {
        return with_python_errors([&] { return Pipeline(pipeline_options(options, true)); });
      }))
      .def_property_readonly("device", &Pipeline::device)
      .def_property_readonly("generation", &detail::PipelineAccess::generation)
      .def("add_host",
           py::overload_cast<Pipeline&, std::uintptr_t, std::size_t, std::size_t, const std::string&, py::object>(&add_span),
           py::arg("data"), py::arg("items"), py::arg("item_bytes"), py::arg("role"), py::arg("owner") = py::none())
      .def("rebind", &rebind_span, py::arg("span"), py::arg("generation"), py::arg("role"), py::arg("data"),
           py::arg("items"), py::arg("owner") = py::none())
      .def("compute",
           [](Pipeline& p, py::object fn, bool replay) {
             auto held = hold_with_gil(std::move(fn));
             p.compute(
                 [held](const Chunk& c) {
                   py::gil_scoped_acquire gil;  // held only while the callable runs
                   (*held)(chunk_info(c));
                 },
                 replay ? Replay::graph : Replay::none);
           },
           py::arg("fn"), py::arg("replay") = false)
      .def("on_chunk_done",
           [](Pipeline& p, py::object fn) {
             auto held = hold_with_gil(std::move(fn));
             p.on_chunk_done([held](std::size_t index, ItemRange items) {
               py::gil_scoped_acquire gil;
               (*held)(index, items.begin, items.end);
             });
           })
      .def("clear_spans", [](Pipeline& p) { p.clear_spans(); })
      .def(
          "run",
          [](Pipeline& p, std::optional<std::uintptr_t> stream) {
            return with_python_errors([&] {
              py::gil_scoped_release release;  // the compute callable takes it back while it runs
              if (stream) return p.run(StreamView(reinterpret_cast<cudaStream_t>(*stream)));
              return p.run();
            });
          },
          py::arg("stream") = py::none());
}

void bind_multi_pipeline(py::module_& m) {
  py::class_<MultiReport::Part>(m, "MultiReportPart", "One GPU's share of a MultiPipeline run.")
      .def_readonly("device", &MultiReport::Part::device)
      .def_property_readonly("items", [](const MultiReport::Part& p) { return py::make_tuple(p.items.begin, p.items.end); })
      .def_readonly("report", &MultiReport::Part::report)
      .def("__repr__", [](const MultiReport::Part& p) {
        return "MultiReportPart(device " + std::to_string(p.device) + ", items " + std::to_string(p.items.begin) + ".." +
               std::to_string(p.items.end) + ", " + std::to_string(p.report.wall_ms) + " ms)";
      });
  py::class_<MultiReport>(m, "MultiReport", "What a MultiPipeline run did, GPU by GPU.")
      .def_readonly("parts", &MultiReport::parts)
      .def_readonly("wall_ms", &MultiReport::wall_ms)
      .def_readonly("item_count", &MultiReport::item_count)
      .def("__repr__", [](const MultiReport& r) {
        return "MultiReport(" + std::to_string(r.parts.size()) + " parts, " + std::to_string(r.item_count) + " items, " +
               std::to_string(r.wall_ms) + " ms)";
      });

  py::class_<MultiPipeline>(m, "_MultiPipeline")
      .def(py::init([](const std::vector<int>& devices, const py::kwargs& options) {
             return with_python_errors(
                 [&] { return std::make_unique<MultiPipeline>(devices, pipeline_options(options, false)); });
           }),
           py::arg("devices"))
      .def("add_host",
           py::overload_cast<MultiPipeline&, std::uintptr_t, std::size_t, std::size_t, const std::string&, py::object>(
               &add_span),
           py::arg("data"), py::arg("items"), py::arg("item_bytes"), py::arg("role"), py::arg("owner") = py::none())
      .def("compute",
           [](MultiPipeline& p, py::object fn) {
             auto held = hold_with_gil(std::move(fn));
             // Called from every GPU's thread at once: each takes the GIL while its callable runs.
             p.compute([held](const Chunk& c, std::size_t part) {
               py::gil_scoped_acquire gil;
               (*held)(chunk_info(c), part);
             });
           })
      .def("set_weights", &MultiPipeline::set_weights)
      .def("run", [](MultiPipeline& p) {
        return with_python_errors([&] {
          py::gil_scoped_release release;
          return p.run();
        });
      });
}

}  // namespace

}  // namespace python
}  // namespace sluice

PYBIND11_MODULE(_sluice, m) {
  using namespace sluice;
  using namespace sluice::python;
  m.doc() = "sluice's C++ core: see the sluice package";
  m.attr("__version__") = SLUICE_VERSION;  // the CMake project's version
  py::register_exception<CudaError>(m, "CudaError", PyExc_RuntimeError);
  py::register_exception<IoError>(m, "IoError", PyExc_OSError);
  py::register_exception<ShardError>(m, "ShardError", PyExc_ValueError);
  m.def("device_count", &Device::count);
  m.def("unavailable_reason", &Device::unavailable_reason);
  m.def("memory_kind", [](std::uintptr_t ptr, std::size_t bytes) {
    return std::string(to_string(memory_kind(reinterpret_cast<const void*>(ptr), bytes)));
  });
  m.def("device_view",
        [](std::uintptr_t data, int device, const std::vector<std::int64_t>& shape, const std::string& type, py::object owner) {
          return device_capsule(reinterpret_cast<void*>(data), device, shape, dl_type(type), std::move(owner));
        });
  m.def("write_timeline", [](const std::string& path, const std::vector<RunReport>& reports, const std::vector<std::string>& titles,
                             const std::string& format) {
    std::vector<Trace> traces;
    for (std::size_t i = 0; i < reports.size(); ++i)
      traces.push_back(make_trace(i < titles.size() ? titles[i] : "run " + std::to_string(i), reports[i]));
    std::ofstream out(path, std::ios::binary);
    if (!out) throw std::runtime_error("cannot write " + path);
    out << (format == "svg" ? timeline_svg(traces) : chrome_trace_json(traces) + "\n");
  });
  // Every range sluice page-locked, live or ended: for soaks that check none stays locked beyond its owner.
  m.def("_page_lock_ledger", [] {
    py::list out;
    for (const auto& r : detail::page_lock_ledger()) out.append(py::make_tuple(r.begin, r.bytes, r.live, r.unlock_failed));
    return out;
  }, "[(begin, bytes, live, unlock_failed)], live ranges and the last ended ones, oldest first");
  bind_options(m);
  bind_pipeline(m);
  bind_multi_pipeline(m);
  bind_loaders(m);
  bind_prefetcher(m);
  bind_checkpoint(m);
  bind_file_sink(m);
  bind_copies_to_host(m);
}
