#include "options.hpp"

#include <string>
#include <vector>

namespace sluice::python {

namespace py = pybind11;

namespace {

const Names<KernelOrder> kernel_orders = {{"in_chunk_order", KernelOrder::in_chunk_order},
                                          {"independent", KernelOrder::independent}};
const Names<HostMemoryPolicy> host_memories = {{"automatic", HostMemoryPolicy::automatic},
                                               {"stage", HostMemoryPolicy::stage},
                                               {"register", HostMemoryPolicy::register_memory}};

}  // namespace

// The lines are what each option does, for Python users; the C++ headers
// (sluice/pipeline/pipeline_options.hpp and the like) say why.
const OptionTable<PipelineOptions>& pipeline_table() {
  using O = PipelineOptions;
  static const OptionTable<O> table("pipeline", {
      plain<O>("chunk_items", &PipelineOptions::chunk_items,
            "items in the largest chunk; 0 picks sizes from the data and from what the first run learnt"),
      plain<O>("first_chunk_items", &PipelineOptions::first_chunk_items,
            "when set, the first and last chunks ramp from this size by doubling up to chunk_items"),
      plain<O>("ramp", &PipelineOptions::ramp, "False cuts every chunk the same size"),
      plain<O>("adapt_chunks", &PipelineOptions::adapt_chunks,
            "with chunk_items 0: the first run times its stages, and where the kernels took longer than the "
            "copies, later runs start and end with 512 KiB chunks (its notes say so)"),
      plain<O>("depth", &PipelineOptions::depth, "device slots per span (>= 1): chunks on the device at once"),
      named<O>("kernel_order", &PipelineOptions::kernel_order, kernel_orders,
            "'in_chunk_order': chunk after chunk on one stream, as chunk-to-chunk state needs; 'independent': "
            "each chunk's compute stands alone, so neighbouring chunks' kernels may overlap (two streams)"),
      plain<O>("compute_streams", &PipelineOptions::compute_streams,
            "compute streams the chunks take turns over; 0: one in chunk order, two for independent kernels"),
      plain<O>("staging_threads", &PipelineOptions::staging_threads,
            "host threads that copy pageable arrays through pinned slots; 0: two fewer than the cores"),
      named<O>("host_memory", &PipelineOptions::host_memory, host_memories,
            "pageable arrays: 'automatic' stages the first run, then page-locks them for later runs until "
            "clear_spans(), rebind() or the pipeline's end; 'stage' always copies through pinned slots; "
            "'register' page-locks them for each run"),
      plain<O>("priority", &PipelineOptions::priority, "CUDA stream priority of the pipeline's streams (lower is more urgent)"),
      plain<O>("record", &PipelineOptions::record, "keep every chunk's stage intervals in the report (a timeline)"),
      plain<O>("report_bound", &PipelineOptions::report_bound,
            "measure the bound (link and host copy rates, once per device) and report efficiency"),
      plain<O>("device", &PipelineOptions::device, "the GPU to run on; None: torch's (CUDA's) current device"),
  });
  return table;
}

const OptionTable<LoaderOptions>& loader_table() {
  using O = LoaderOptions;
  static const OptionTable<O> table("loader", {
      plain<O>("batch", &O::batch, "this rank's rows (windows or records) per batch; batch x world is the global batch"),
      plain<O>("shuffle", &O::shuffle, "a new order of the samples each epoch, the same on every rank"),
      plain<O>("seed", &O::seed, "the shuffle's seed"),
      plain<O>("rank", &O::rank, "this process's share of a data-parallel job"),
      plain<O>("world", &O::world, "the job's ranks"),
      plain<O>("drop_last", &O::drop_last,
               "leave out an epoch's last global batch where it is short (else every rank's last batch is shorter)"),
      plain<O>("ahead", &O::ahead, "batches on their way to the GPU ahead of the step (1 to most_ahead)"),
      plain<O>("threads", &O::threads, "reader threads; 0: one per hardware thread"),
      plain<O>("device", &O::device, "the GPU to load onto; None: CUDA's current device"),
  });
  return table;
}

const OptionTable<BatchPrefetchOptions>& prefetcher_table() {
  using O = BatchPrefetchOptions;
  static const OptionTable<O> table("prefetcher", {
      plain<O>("ahead", &O::ahead, "batches on their way to the GPU beyond the ones the loop holds (1 to most_ahead)"),
      plain<O>("threads", &O::threads, "staging threads for pageable arrays; 0: two fewer than the hardware threads"),
      plain<O>("device", &O::device, "the GPU to fetch onto; None: torch's current device"),
  });
  return table;
}

const OptionTable<StreamedWeightsOptions>& streamed_weights_table() {
  using O = StreamedWeightsOptions;
  static const OptionTable<O> table("streamed weights", {
      plain<O>("ahead", &O::ahead, "blocks copied ahead of the one running (1 to most_ahead) where no budget is given"),
      plain<O>("device_budget", &O::device_budget,
               "bytes of device slots: ahead becomes the most that fit (two slots at least)"),
      plain<O>("device", &O::device, "the GPU to stream onto; None: torch's current device"),
  });
  return table;
}

PipelineOptions pipeline_options(const py::kwargs& given, bool with_device) {
  return pipeline_table().fill(given, with_device ? std::vector<std::string>{} : std::vector<std::string>{"device"});
}

void bind_options(py::module_& m) {
  m.def("pipeline_options", [] { return pipeline_table().describe(); },
        "The pipelines' options: [(name, default, allowed values or None, what it does)].");
  m.def("loader_options", [] { return loader_table().describe(); }, "TokenLoader's options, as pipeline_options().");
  m.def("prefetcher_options", [] { return prefetcher_table().describe(); }, "Prefetcher's options, as pipeline_options().");
  m.def("streamed_weights_options", [] { return streamed_weights_table().describe(); },
        "The streamed weights' options (StreamedLayers), as pipeline_options().");
  m.attr("most_ahead") = most_ahead;
}

}  // namespace sluice::python
