#pragma once
// The pipelines' options as Python sees them, stated once: each option's
// name, the values it takes, and a line of what it does. Defaults are read
// from a default PipelineOptions (the C++ statement). The binding fills
// PipelineOptions from keyword arguments with it, and the Python classes
// build their signatures and docstrings from it (_sluice.pipeline_options()).
#include <pybind11/pybind11.h>

#include "sluice/pipeline/pipeline_options.hpp"

namespace sluice::python {

// PipelineOptions from keyword arguments; an unknown name or value is a
// TypeError or ValueError that lists what is known. `device` is accepted
// only when `with_device` (a MultiPipeline takes its devices instead).
PipelineOptions pipeline_options(const pybind11::kwargs& given, bool with_device);

// _sluice.pipeline_options(): [(name, default, values or None, doc)], in order.
void bind_pipeline_options(pybind11::module_& m);

}  // namespace sluice::python
