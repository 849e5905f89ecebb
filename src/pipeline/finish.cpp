// The end of a run: everything it started is waited for, sinks commit or are abandoned,
// and the caller gets the report or the failure, said in full.
#include <algorithm>
#include <stdexcept>

#include "run_state.hpp"
#include "sluice/error.hpp"
#include "sluice/file_io.hpp"
#include "sluice/host_rates.hpp"
#include "sluice/staging_rates.hpp"
#include "sluice/link_rates.hpp"

namespace sluice {

using detail::HostPath;

namespace {

// Union of the compute intervals: several compute streams may overlap.
double compute_union_ms(std::vector<StageInterval> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const StageInterval& a, const StageInterval& b) { return a.start_ms < b.start_ms; });
  double total = 0, end = -1e300;
  for (const auto& i : intervals) {
    if (i.lane != Lane::compute) continue;
    const double start = std::max(i.start_ms, end);
    if (i.end_ms > start) total += i.end_ms - start;
    end = std::max(end, i.end_ms);
  }
  return total;
}

}  // namespace

RunReport Submission::State::finish() {
  // Staging work submitted ahead of a failure still reads and writes the
  // pinned slots: it ends before the slots can be used again.
  for (auto& ring : stage_in_jobs)
    for (auto& job : ring)
      if (job) try {
          job->wait();
        } catch (...) {
        }
  // After a sticky error these fail again; the failure is already known.
  cudaError_t stream_error = cudaStreamSynchronize(e.h2d.get());
  for (auto& s : e.compute)
    if (const cudaError_t c = cudaStreamSynchronize(s.get()); stream_error == cudaSuccess) stream_error = c;
  if (const cudaError_t c = cudaStreamSynchronize(e.d2h.get()); stream_error == cudaSuccess) stream_error = c;
  if (stream_error != cudaSuccess) {
    (void)cudaGetLastError();
    if (!failed)
      fail(Failure::cuda, plan.chunk_count() > 0 ? plan.chunk_count() - 1 : 0, "finish",
           std::make_exception_ptr(CudaError(stream_error, "cudaStreamSynchronize at the end of the run", __FILE__, __LINE__)));
  }
  const std::size_t items_done = drained > 0 ? plan.chunk(drained - 1).end : 0;
  // Sinks commit in span order; one that cannot fails the run, and it and the rest are abandoned.
  for (std::size_t k = 0; k < e.spans.size(); ++k) {
    Sink* sink = e.spans[k].sink.get();
    if (!sink) continue;
    if (!failed) try {
        sink->commit();
        continue;
      } catch (const IoError&) {
        fail(Failure::io, plan.chunk_count() > 0 ? plan.chunk_count() - 1 : 0, "commit, " + e.spans[k].describe(k),
             std::current_exception());
      } catch (...) {
        fail(Failure::component, plan.chunk_count() > 0 ? plan.chunk_count() - 1 : 0, "commit, " + e.spans[k].describe(k),
             std::current_exception());
      }
    sink->abandon(items_done);
  }
  e.slots_filled = !failed && plan.chunk_count() > 0;
  // The automatic policy registers what this run staged, now that it is over.
  for (auto& s : e.spans)
    if (!failed && s.register_after_run && !s.registration) {
      s.registration = std::make_unique<detail::SpanRegistration>();
      s.registration->register_in_background(e.registration_queue(), s.host, s.bytes(), s.role == SpanRole::input, e.device);
    }
  e.busy = false;

  if (failed) {
    const std::string where =
        plan.chunk_count() == 0 ? failed_stage
                                : chunk_text(failed_chunk) + ", stage " + failed_stage + " (the run stopped with " +
                                      std::to_string(drained) + " of " + std::to_string(plan.chunk_count()) +
                                      " chunks finished)";
    try {
      std::rethrow_exception(error);
    } catch (const CudaError& err) {
      if (failure == Failure::callback) throw;
      throw CudaError(err, where);
    } catch (const IoError& err) {
      throw IoError(err, where);
    } catch (const std::exception& err) {
      if (failure != Failure::component) throw;
      std::throw_with_nested(std::runtime_error(where + ": " + err.what()));
    }
  }

  RunReport report;
  report.item_count = plan.item_count();
  report.chunk_items = plan.chunk_items();
  report.chunk_count = plan.chunk_count();
  report.depth = e.depth();
  report.compute_streams = static_cast<unsigned>(e.compute.size());
  report.notes = std::move(notes);
  report.device_bytes_allocated = allocated_device;
  report.pinned_bytes_allocated = allocated_pinned;
  for (const auto& s : e.spans) {
    const auto bytes = static_cast<double>(s.bytes());
    if (s.copied_in()) report.volume.h2d_bytes += bytes;
    if (s.copied_out()) report.volume.d2h_bytes += bytes;
    if (s.path == HostPath::staged && s.copied_in()) report.volume.staged_in_bytes += bytes;
    if (s.path == HostPath::staged && s.copied_out()) report.volume.staged_out_bytes += bytes;
    if (s.path == HostPath::source) report.volume.read_bytes += bytes;
    if (s.path == HostPath::sink) report.volume.written_bytes += bytes;
  }
  // Device work ends at `finish_event`; staged outputs land on the host a little later.
  const double device_ms = plan.chunk_count() > 0 ? elapsed_ms(origin, finish_event) : 0.0;
  report.wall_ms = std::max(device_ms, host_end_ms);
  if (timed) report.volume.kernel_ms = compute_union_ms(drain_intervals);
  if (e.options.record) {
    report.intervals = std::move(driver_intervals);
    report.intervals.insert(report.intervals.end(), drain_intervals.begin(), drain_intervals.end());
    std::sort(report.intervals.begin(), report.intervals.end(),
              [](const StageInterval& a, const StageInterval& b) { return a.start_ms < b.start_ms; });
  }
  if (e.options.report_bound && plan.chunk_count() > 0) {
    EngineRates rates = with_link({}, link_rates(e.device));
    if (report.volume.staged_in_bytes > 0 || report.volume.staged_out_bytes > 0) {
      // The faster of link idle and link streaming for staging alone: a bound
      // no run can beat; and the two sharing host memory.
      const HostCopyRates beside_link = staging_rates(e.device, e.staging_pool());
      rates = with_staging_beside_link(with_host(rates, fastest_of(beside_link, host_copy_rates(e.staging_pool()))),
                                       beside_link);
    }
    report.bound = compute_bound(report.volume, rates);
  }
  return report;
}

}  // namespace sluice
