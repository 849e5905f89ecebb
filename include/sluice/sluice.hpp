#pragma once
// Every public type of sluice, for users who prefer one include. The headers
// under include/sluice/<concept>/ are the API; nothing else is.
#if __cplusplus < 202002L
#error "sluice needs C++20: in CMake, link sluice::sluice (which asks for it) and set no older CXX_STANDARD or CUDA_STANDARD"
#endif

// The core: the CUDA runtime in RAII types, devices, memory, file errors
#include "sluice/core/ahead.hpp"
#include "sluice/core/byte_size.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/device_info.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/event.hpp"
#include "sluice/core/event_timer.hpp"
#include "sluice/core/host_fn.hpp"
#include "sluice/core/host_registration.hpp"
#include "sluice/core/host_timer.hpp"
#include "sluice/core/io_error.hpp"
#include "sluice/core/memory_kind.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/pointer_query.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/core/stream_view.hpp"

// Timelines of stream work, and their writers
#include "sluice/trace/stage_interval.hpp"
#include "sluice/trace/trace.hpp"
#include "sluice/trace/trace_chrome.hpp"
#include "sluice/trace/trace_recorder.hpp"
#include "sluice/trace/trace_svg.hpp"
#include "sluice/trace/trace_terminal.hpp"

// The bound every run is judged by
#include "sluice/bound/bound.hpp"

// The pipeline: its schedule, its host executor, sources and sinks, its report
#include "sluice/pipeline/chunk.hpp"
#include "sluice/pipeline/chunk_plan.hpp"
#include "sluice/pipeline/file_io.hpp"
#include "sluice/pipeline/host_executor.hpp"
#include "sluice/pipeline/pipeline.hpp"
#include "sluice/pipeline/pipeline_options.hpp"
#include "sluice/pipeline/run_report.hpp"
#include "sluice/pipeline/schedule.hpp"
#include "sluice/pipeline/source.hpp"

// Training data
#include "sluice/loader/batch_plan.hpp"
#include "sluice/loader/batch_prefetch_options.hpp"
#include "sluice/loader/batch_prefetcher.hpp"
#include "sluice/loader/prefetcher.hpp"
#include "sluice/loader/token_shard.hpp"
#include "sluice/loader/token_windows.hpp"

// Checkpoints onto the GPU, and weights streamed through it
#include "sluice/weights/checkpoint.hpp"
#include "sluice/weights/streamed_weights.hpp"

// The probe, the model and the tuner
#include "sluice/measure/model.hpp"
#include "sluice/measure/probe.hpp"
#include "sluice/measure/probe_result.hpp"
#include "sluice/measure/stats.hpp"
#include "sluice/measure/tuner.hpp"

// Many GPUs
#include "sluice/multigpu/multi_gpu_plans.hpp"
#include "sluice/multigpu/multi_pipeline.hpp"
