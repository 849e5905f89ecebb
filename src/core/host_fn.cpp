#include "sluice/core/host_fn.hpp"

#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "sluice/core/error.hpp"

namespace sluice {

namespace {

// A stream's id is unique for the life of the process (cudaStreamGetId); its
// handle is not: a destroyed stream's handle comes back for a new stream.
using StreamId = unsigned long long;

StreamId id_of(StreamView stream) {
  StreamId id = 0;
  SLUICE_CUDA_CHECK(cudaStreamGetId(stream.get(), &id));
  return id;
}

// Per stream: how many host functions are queued and not yet finished, and
// the first exception one raised, waiting for the owner's next synchronisation.
struct StreamCalls {
  std::size_t queued = 0;
  std::exception_ptr error;
};

struct PendingCalls {
  std::mutex mutex;
  std::unordered_map<StreamId, StreamCalls> by_stream;

  // Drops a stream's entry once nothing more can arrive for it.
  void forget_if_idle(std::unordered_map<StreamId, StreamCalls>::iterator it) {
    if (it->second.queued == 0 && !it->second.error) by_stream.erase(it);
  }
};

PendingCalls& pending() {
  static PendingCalls calls;
  return calls;
}

struct HostCall {
  std::function<void()> fn;
  StreamId stream;
};

// One counted call of stream `id` is over: it ran (`error`: what it threw),
// or it was never queued after all. The stream keeps its first error.
void call_over(StreamId id, std::exception_ptr error) {
  auto& calls = pending();
  std::lock_guard lock(calls.mutex);
  auto it = calls.by_stream.find(id);
  if (it == calls.by_stream.end()) return;  // cannot happen: enqueue_host counted it
  --it->second.queued;
  if (error && !it->second.error) it->second.error = error;
  calls.forget_if_idle(it);
}

// Set while this thread runs a host function (and destroys its captures): a
// Stream destroyed there must not wait for its own queued host functions,
// which would wait for this one.
thread_local bool in_host_call = false;

void CUDART_CB run_host_call(void* data) {
  in_host_call = true;
  struct Leave {
    ~Leave() { in_host_call = false; }
  } leave;  // declared before `call`: cleared after the captures are gone
  std::unique_ptr<HostCall> call(static_cast<HostCall*>(data));
  std::exception_ptr error;
  try {
    call->fn();
  } catch (...) {
    error = std::current_exception();
  }
  call_over(call->stream, error);
}

std::exception_ptr take_error(StreamId id) {
  auto& calls = pending();
  std::lock_guard lock(calls.mutex);
  auto it = calls.by_stream.find(id);
  if (it == calls.by_stream.end()) return nullptr;
  auto error = std::exchange(it->second.error, nullptr);
  calls.forget_if_idle(it);
  return error;
}

bool any_pending() {
  auto& calls = pending();
  std::lock_guard lock(calls.mutex);
  return !calls.by_stream.empty();
}

}  // namespace

void enqueue_host(StreamView stream, std::function<void()> fn) {
  // A captured host function would run once a replay and be counted once: the
  // count and the callable's lifetime would both be wrong.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  SLUICE_CUDA_CHECK(cudaStreamIsCapturing(stream.get(), &capture));
  if (capture != cudaStreamCaptureStatusNone)
    throw std::logic_error("enqueue_host: the stream is being captured into a CUDA graph (a replayed compute cannot "
                           "enqueue host functions)");
  const StreamId id = id_of(stream);
  auto call = std::make_unique<HostCall>(HostCall{std::move(fn), id});
  auto& calls = pending();
  {
    std::lock_guard lock(calls.mutex);
    ++calls.by_stream[id].queued;
  }
  const cudaError_t code = cudaLaunchHostFunc(stream.get(), run_host_call, call.get());
  if (code != cudaSuccess) call_over(id, nullptr);
  SLUICE_CUDA_CHECK(code);
  call.release();  // owned by run_host_call from here on
}

void rethrow_host_fn_error(StreamView stream) {
  if (!any_pending()) return;  // the common case: no stream id to look up
  if (auto error = take_error(id_of(stream))) std::rethrow_exception(error);
}

void rethrow_any_host_fn_error() {
  std::exception_ptr error;
  {
    auto& calls = pending();
    std::lock_guard lock(calls.mutex);
    for (auto it = calls.by_stream.begin(); it != calls.by_stream.end(); ++it) {
      if (!it->second.error) continue;
      error = std::exchange(it->second.error, nullptr);
      calls.forget_if_idle(it);
      break;
    }
  }
  if (error) std::rethrow_exception(error);
}

bool has_host_fn_error(StreamView stream) {
  if (!any_pending()) return false;
  const StreamId id = id_of(stream);
  auto& calls = pending();
  std::lock_guard lock(calls.mutex);
  auto it = calls.by_stream.find(id);
  return it != calls.by_stream.end() && it->second.error != nullptr;
}

std::exception_ptr settle_host_fns(StreamView stream) noexcept {
  if (!any_pending()) return nullptr;
  StreamId id = 0;
  if (cudaStreamGetId(stream.get(), &id) != cudaSuccess) return nullptr;
  bool queued = false;
  {
    auto& calls = pending();
    std::lock_guard lock(calls.mutex);
    auto it = calls.by_stream.find(id);
    queued = it != calls.by_stream.end() && it->second.queued > 0;
  }
  // Queued host functions run after the handle is gone; wait for them here
  // so that their errors are reported now, not inherited by nobody. Not from
  // inside a host function: those queued behind it would wait for it. Their
  // errors then stay under the dead stream's id, which no stream reuses, for
  // Device::synchronize() to report.
  if (queued && !in_host_call) SLUICE_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream.get()));
  return take_error(id);
}

}  // namespace sluice
