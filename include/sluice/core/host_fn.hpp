#pragma once
// Run host code in stream order (cudaLaunchHostFunc), with exceptions that
// are never lost: a callable that throws has its exception stored and
// rethrown by the next StreamView::synchronize() of that stream (or
// Device::synchronize()), on the caller's thread. Exceptions never cross the
// driver's callback thread.
//
// As with cudaLaunchHostFunc, the callable must not call CUDA API functions.
#include <exception>
#include <functional>

#include "sluice/core/stream_view.hpp"

namespace sluice {

// Throws std::logic_error on a stream being captured into a CUDA graph.
void enqueue_host(StreamView stream, std::function<void()> fn);

// Rethrows and clears the first stored exception of `stream`, if any.
void rethrow_host_fn_error(StreamView stream);
// Rethrows and clears the first stored exception of any stream, if any.
void rethrow_any_host_fn_error();
// True when an exception from `stream` is waiting to be rethrown.
bool has_host_fn_error(StreamView stream);
// For a stream about to be destroyed: waits for the host functions still
// queued on it (not when called from a host function), then hands back (and
// forgets) the first exception one raised, or null. A thread that destroys a
// Stream must not hold what one of its queued host functions waits for. Errors are keyed by the stream's process-unique id, never by its
// handle, which the driver may give to the next stream it creates.
std::exception_ptr settle_host_fns(StreamView stream) noexcept;

}  // namespace sluice
