#include "options.hpp"

#include <pybind11/stl.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::python {

namespace py = pybind11;

namespace {

template <typename E>
using Names = std::vector<std::pair<const char*, E>>;

const Names<KernelOrder> kernel_orders = {{"in_chunk_order", KernelOrder::in_chunk_order},
                                          {"independent", KernelOrder::independent}};
const Names<HostMemoryPolicy> host_memories = {{"automatic", HostMemoryPolicy::automatic},
                                               {"stage", HostMemoryPolicy::stage},
                                               {"register", HostMemoryPolicy::register_memory}};

struct Option {
  const char* name;
  const char* doc;
  std::vector<std::string> values;  // empty: any value of the field's type
  std::function<py::object(const PipelineOptions&)> get;
  std::function<void(PipelineOptions&, py::handle)> set;
};

template <typename T>
Option plain(const char* name, T PipelineOptions::*field, const char* doc) {
  return {name, doc, {}, [field](const PipelineOptions& o) { return py::cast(o.*field); },
          [field](PipelineOptions& o, py::handle v) { o.*field = v.cast<T>(); }};
}

template <typename E>
Option named(const char* name, E PipelineOptions::*field, const Names<E>& names, const char* doc) {
  std::vector<std::string> values;
  for (const auto& n : names) values.emplace_back(n.first);
  return {name, doc, values,
          [field, &names](const PipelineOptions& o) -> py::object {
            for (const auto& n : names)
              if (n.second == o.*field) return py::str(n.first);
            return py::none();
          },
          [name, field, &names, values](PipelineOptions& o, py::handle v) {
            const auto text = py::isinstance<py::str>(v) ? v.cast<std::string>() : std::string(py::repr(v));
            for (const auto& n : names)
              if (text == n.first) {
                o.*field = n.second;
                return;
              }
            std::string known;
            for (const auto& k : values) known += (known.empty() ? "'" : ", '") + k + "'";
            throw py::value_error(std::string(name) + " must be one of " + known + ", not " + std::string(py::repr(v)));
          }};
}

// The one list. The lines are what each option does, for Python users; the
// C++ header (sluice/pipeline/pipeline_options.hpp) says why.
const std::vector<Option>& options() {
  static const std::vector<Option> table = {
      plain("chunk_items", &PipelineOptions::chunk_items,
            "items in the largest chunk; 0 picks sizes from the data and from what the first run learnt"),
      plain("first_chunk_items", &PipelineOptions::first_chunk_items,
            "when set, the first and last chunks ramp from this size by doubling up to chunk_items"),
      plain("ramp", &PipelineOptions::ramp, "False cuts every chunk the same size"),
      plain("adapt_chunks", &PipelineOptions::adapt_chunks,
            "with chunk_items 0: the first run times its stages, and where the kernels took longer than the "
            "copies, later runs start and end with 512 KiB chunks (its notes say so)"),
      plain("depth", &PipelineOptions::depth, "device slots per span (>= 1): chunks on the device at once"),
      named("kernel_order", &PipelineOptions::kernel_order, kernel_orders,
            "'in_chunk_order': chunk after chunk on one stream, as chunk-to-chunk state needs; 'independent': "
            "each chunk's compute stands alone, so neighbouring chunks' kernels may overlap (two streams)"),
      plain("compute_streams", &PipelineOptions::compute_streams,
            "compute streams the chunks take turns over; 0: one in chunk order, two for independent kernels"),
      plain("staging_threads", &PipelineOptions::staging_threads,
            "host threads that copy pageable arrays through pinned slots; 0: two fewer than the cores"),
      named("host_memory", &PipelineOptions::host_memory, host_memories,
            "pageable arrays: 'automatic' stages the first run, then page-locks them for later runs until "
            "clear_spans(), rebind() or the pipeline's end; 'stage' always copies through pinned slots; "
            "'register' page-locks them for each run"),
      plain("priority", &PipelineOptions::priority, "CUDA stream priority of the pipeline's streams (lower is more urgent)"),
      plain("record", &PipelineOptions::record, "keep every chunk's stage intervals in the report (a timeline)"),
      plain("report_bound", &PipelineOptions::report_bound,
            "measure the bound (link and host copy rates, once per device) and report efficiency"),
      plain("device", &PipelineOptions::device, "the GPU to run on; None: torch's (CUDA's) current device"),
  };
  return table;
}

}  // namespace

PipelineOptions pipeline_options(const py::kwargs& given, bool with_device) {
  PipelineOptions o;
  for (const auto& [key, value] : given) {
    const auto name = key.cast<std::string>();
    const Option* found = nullptr;
    for (const auto& option : options())
      if (name == option.name && (with_device || name != "device")) found = &option;
    if (!found) {
      std::string known;
      for (const auto& option : options())
        if (with_device || std::string(option.name) != "device") known += (known.empty() ? "" : ", ") + std::string(option.name);
      throw py::type_error("unknown pipeline option '" + name + "': the options are " + known);
    }
    try {
      found->set(o, value);
    } catch (const py::cast_error&) {
      throw py::type_error(name + " takes " + (name == "device" ? "a device number or None" : "a number") + ", not " +
                           std::string(py::repr(value)));
    }
  }
  return o;
}

void bind_pipeline_options(py::module_& m) {
  m.def("pipeline_options", [] {
    const PipelineOptions defaults;
    py::list out;
    for (const auto& option : options())
      out.append(py::make_tuple(option.name, option.get(defaults),
                                option.values.empty() ? py::object(py::none()) : py::object(py::cast(option.values)),
                                option.doc));
    return out;
  }, "The pipelines' options: [(name, default, allowed values or None, what it does)].");
}

}  // namespace sluice::python
