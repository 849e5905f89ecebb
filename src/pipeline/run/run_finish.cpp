// The end of a run: everything it started is waited for, sinks commit (or
// are abandoned, leaving the previous output as it was), and the caller gets
// the report or the failure, said in full.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "pipeline/schedule/chunking.hpp"
#include "run.hpp"
#include "sluice/pipeline/file_io.hpp"

namespace sluice::detail {

namespace {

// Union of one lane's intervals: several compute streams may overlap.
double union_ms(std::vector<StageInterval> intervals, Lane lane) {
  std::sort(intervals.begin(), intervals.end(),
            [](const StageInterval& a, const StageInterval& b) { return a.start_ms < b.start_ms; });
  double total = 0, end = -1e300;
  for (const auto& i : intervals) {
    if (i.lane != lane) continue;
    const double start = std::max(i.start_ms, end);
    if (i.end_ms > start) total += i.end_ms - start;
    end = std::max(end, i.end_ms);
  }
  return total;
}

// `error` nested in a runtime_error that says where it happened; the caller
// gets the original back with std::rethrow_if_nested.
std::exception_ptr nested(const std::string& where, std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& err) {
    try {
      std::throw_with_nested(std::runtime_error(where + ": " + err.what()));
    } catch (...) {
      return std::current_exception();
    }
  } catch (...) {
    try {
      std::throw_with_nested(std::runtime_error(where + ": an exception not derived from std::exception"));
    } catch (...) {
      return std::current_exception();
    }
  }
}

// What a measurement threw, for a note.
std::string what_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

// A measurement made after the sinks committed. The run has happened and
// its outputs replaced the previous ones: a measurement that fails (the
// bound's probe out of device memory) is said in the report's notes, never
// thrown, or the caller would believe the previous outputs stand.
template <typename Measure>
void measure_after_commit(std::vector<std::string>& notes, const std::string& what, const std::string& instead,
                          Measure&& measure) {
  try {
    measure();
  } catch (...) {
    notes.push_back(what + " could not be measured (" + what_of(std::current_exception()) + "): " + instead);
  }
}

}  // namespace

// Sinks commit one after another, in span order. A sink that cannot commit
// fails the run, and the sinks after it are abandoned with the rest.
void Run::commit_sinks(std::size_t items_done) {
  SpanSet& spans = core_.spans();
  const std::size_t last = schedule_->chunk_count() > 0 ? schedule_->chunk_count() - 1 : 0;
  std::size_t k = 0;  // the first sink not committed
  for (; k < spans.size() && !failed_; ++k) {
    Sink* sink = spans[k].sink.get();
    if (!sink) continue;
    try {
      sink->commit();
    } catch (const IoError&) {
      fail(Failure::io, last, "commit, " + spans[k].describe(k), std::current_exception());
      break;  // this sink, and those after it, are abandoned
    } catch (...) {
      fail(Failure::component, last, "commit, " + spans[k].describe(k), std::current_exception());
      break;
    }
  }
  if (!failed_) return;
  for (; k < spans.size(); ++k)
    if (spans[k].sink) spans[k].sink->abandon(items_done);
}

std::string Run::learn_from_intervals() {
  // A compute interval starts when its stream reaches the mark before the
  // callable runs: the host's time in the callable (a kernel's first launch
  // loading its module, a Python callable) is not the kernel's, and is left out.
  std::vector<StageInterval> kernels;
  for (StageInterval i : drain_intervals_)
    if (i.lane == Lane::compute && i.chunk < compute_enqueue_ms_.size()) {
      i.start_ms = std::min(i.end_ms, i.start_ms + compute_enqueue_ms_[i.chunk]);
      kernels.push_back(i);
    }
  const double kernel = union_ms(kernels, Lane::compute), in = union_ms(drain_intervals_, Lane::h2d),
               out = union_ms(drain_intervals_, Lane::d2h);
  const bool bound = kernels_dominate(kernel, in, out);
  core_.set_kernel_bound(bound);
  return fmt::format("chunk sizes (adapt_chunks): the kernels took {:.3f} ms, the copies {:.3f} ms in and {:.3f} ms out: {}",
                     kernel, in, out,
                     bound ? "the kernels decide, so later runs cut " + learnt_plan_ + ", and the kernels wait less for them"
                           : "the kernels do not take a quarter longer than the copies, and later runs keep these chunks");
}

RunReport Run::finish() {
  const Schedule& s = *schedule_;
  const std::size_t n = s.chunk_count();
  // Staging work submitted ahead of a failure still reads and writes the
  // pinned slots: it ends before the slots can be used again.
  for (auto& ring : stage_in_jobs_)
    for (auto& job : ring)
      if (job) try {
          job->wait();
        } catch (...) {
        }
  const auto binding = exec_.bind_thread();
  if (std::exception_ptr error = exec_.synchronize(); error && !failed_)
    fail(Failure::device, n > 0 ? n - 1 : 0, "finish", error);
  // A failed run's chunks past the drain whose copies out landed are in
  // host memory, as a direct copy's bytes are: their ends through a lock's
  // buffer land too. (Their event sets are still theirs: the driver reuses
  // one only once the drain has finished its chunk.) After a sticky CUDA
  // error every event reports it, and such chunks keep their ends unwritten.
  if (mode_ != Mode::replay)
    for (std::size_t chunk = std::max(drained_, edges_out_to_); chunk < enqueued_; ++chunk)
      if (const OpStatus status = exec_.status({chunk, Stage::d2h}); status.done && !status.error)
        edges_out(s.plan().chunk(chunk));
  const std::size_t items_done = drained_ > 0 ? s.plan().chunk(drained_ - 1).end : 0;
  commit_sinks(items_done);
  core_.spans().after_run(!failed_, exec_, core_.registrar());

  std::exception_ptr outcome;
  RunReport report;
  if (failed_) {
    const std::string where = n == 0 ? failed_stage_
                                     : chunk_text(failed_chunk_) + ", stage " + failed_stage_ + " (the run stopped with " +
                                           std::to_string(drained_) + " of " + std::to_string(n) + " chunks finished)";
    switch (failure_) {
      case Failure::callback:
        if (n > 0 && failed_stage_ == to_string(Stage::compute))
          outcome = nested("the compute callable threw at " + where, error_);
        else if (n > 0 && failed_stage_ == done_stage)
          outcome = nested("the chunk-done callable threw at " + where, error_);
        else
          outcome = error_;
        break;
      case Failure::device:
        outcome = exec_.with_context(error_, where);
        if (!outcome) outcome = nested(where, error_);
        break;
      case Failure::io:
        try {
          std::rethrow_exception(error_);
        } catch (const IoError& err) {
          outcome = std::make_exception_ptr(IoError(err, where));
        } catch (...) {
          outcome = nested(where, error_);
        }
        break;
      default: outcome = nested(where, error_); break;
    }
  } else {
    report.item_count = s.plan().item_count();
    report.chunk_items = s.plan().chunk_items();
    report.chunk_count = n;
    report.depth = s.depth();
    report.compute_streams = s.compute_streams();
    report.notes = std::move(notes_);
    report.device_bytes_allocated = allocated_.device;
    report.pinned_bytes_allocated = allocated_.pinned;
    for (const auto& span : core_.spans()) {
      const auto bytes = static_cast<double>(span.bytes());
      if (span.copied_in()) report.volume.h2d_bytes += bytes;
      if (span.copied_out()) report.volume.d2h_bytes += bytes;
      if (span.path == HostPath::staged && span.copied_in()) report.volume.staged_in_bytes += bytes;
      if (span.path == HostPath::staged && span.copied_out()) report.volume.staged_out_bytes += bytes;
      if (span.path == HostPath::source) report.volume.read_bytes += bytes;
      if (span.path == HostPath::sink) report.volume.written_bytes += bytes;
    }
    // Device work ends at the finish mark (a run that times its stages marks
    // it); the host sees the last output a little later, and an untimed run is
    // timed by the host alone, from the run's start.
    report.wall_ms = host_end_ms_;
    if (n > 0)
      measure_after_commit(report.notes, "the device's time for the run", "the wall time is the host's alone",
                           [&] { report.wall_ms = std::max(exec_.run_ms(), host_end_ms_); });
    if (timed_ && n > 0) {
      report.volume.kernel_ms = union_ms(drain_intervals_, Lane::compute);
      if (learning_) report.notes.push_back(learn_from_intervals());
    }
    // A replay's host work was its capture's: its fixed costs are left 0.
    if (timed_ && n > 0 && mode_ != Mode::replay) {
      // The device's origin is marked as the run starts, when its streams are
      // idle: it stands for the host's origin within a few microseconds.
      report.overhead.prepare_ms = std::chrono::duration<double, std::milli>(host_origin_ - called_).count();
      report.overhead.start_ms = report.overhead.prepare_ms + first_copy_ms_;
      report.overhead.end_ms = std::max(0.0, host_ms(Clock::now()) - last_copy_ms_);
      report.overhead.host_us_per_chunk = driver_busy_ms_ * 1000.0 / static_cast<double>(n);
    }
    if (core_.options().record && mode_ != Mode::replay) {  // a replay's host intervals are its capture's
      report.intervals = std::move(driver_intervals_);
      report.intervals.insert(report.intervals.end(), drain_intervals_.begin(), drain_intervals_.end());
      std::sort(report.intervals.begin(), report.intervals.end(),
                [](const StageInterval& a, const StageInterval& b) { return a.start_ms < b.start_ms; });
    }
    if (core_.options().report_bound && n > 0) {
      const bool staged = report.volume.staged_in_bytes > 0 || report.volume.staged_out_bytes > 0;
      measure_after_commit(report.notes, "bound: the engines' rates", "the run has no bound, and claims no efficiency",
                           [&] {
                             if (const auto rates = exec_.rates(staged, core_.staging_pool()))
                               report.bound = compute_bound(report.volume, *rates);
                           });
    }
  }
  // The pipeline is free for the next run only now: nothing above may see
  // another thread's clear_spans() or a new run.
  core_.release();
  if (outcome) std::rethrow_exception(outcome);
  return report;
}

}  // namespace sluice::detail
