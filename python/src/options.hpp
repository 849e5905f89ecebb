#pragma once
// Every product's options as Python sees them, stated once (option_table.hpp):
// the pipelines', TokenLoader's, Prefetcher's and the streamed weights'. Each
// default is read from the product's default C++ options struct; the binding
// fills the struct from keyword arguments with its table, and the Python
// classes build their signatures and docstrings from it
// (_sluice.pipeline_options(), loader_options(), ...).
#include <pybind11/pybind11.h>

#include "option_table.hpp"
#include "sluice/core/ahead.hpp"
#include "sluice/loader/batch_prefetch_options.hpp"
#include "sluice/loader/prefetcher.hpp"
#include "sluice/pipeline/pipeline_options.hpp"
#include "sluice/weights/streamed_weights.hpp"

namespace sluice::python {

const OptionTable<PipelineOptions>& pipeline_table();
const OptionTable<LoaderOptions>& loader_table();
const OptionTable<BatchPrefetchOptions>& prefetcher_table();
const OptionTable<StreamedWeightsOptions>& streamed_weights_table();

// PipelineOptions from keyword arguments; an unknown name or value is a
// TypeError or ValueError that lists what is known. `device` is accepted
// only when `with_device` (a MultiPipeline takes its devices instead).
PipelineOptions pipeline_options(const pybind11::kwargs& given, bool with_device);

// _sluice.<product>_options(): [(name, default, values or None, doc)], in
// order, for each product; _sluice.most_ahead.
void bind_options(pybind11::module_& m);

}  // namespace sluice::python
