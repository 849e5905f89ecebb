#include "sluice/core/host_fn.hpp"

#include <memory>
#include <mutex>
#include <unordered_map>

#include "sluice/core/error.hpp"

namespace sluice {

namespace {

// First exception per stream, waiting for the owner's next synchronisation.
struct PendingErrors {
  std::mutex mutex;
  std::unordered_map<cudaStream_t, std::exception_ptr> by_stream;
};

PendingErrors& pending() {
  static PendingErrors errors;
  return errors;
}

struct HostCall {
  std::function<void()> fn;
  cudaStream_t stream;
};

void CUDART_CB run_host_call(void* data) {
  std::unique_ptr<HostCall> call(static_cast<HostCall*>(data));
  try {
    call->fn();
  } catch (...) {
    auto& errors = pending();
    std::lock_guard lock(errors.mutex);
    errors.by_stream.try_emplace(call->stream, std::current_exception());
  }
}

}  // namespace

void enqueue_host(StreamView stream, std::function<void()> fn) {
  auto call = std::make_unique<HostCall>(HostCall{std::move(fn), stream.get()});
  SLUICE_CUDA_CHECK(cudaLaunchHostFunc(stream.get(), run_host_call, call.get()));
  call.release();  // owned by run_host_call from here on
}

void rethrow_host_fn_error(StreamView stream) {
  std::exception_ptr error;
  {
    auto& errors = pending();
    std::lock_guard lock(errors.mutex);
    auto it = errors.by_stream.find(stream.get());
    if (it == errors.by_stream.end()) return;
    error = it->second;
    errors.by_stream.erase(it);
  }
  std::rethrow_exception(error);
}

void rethrow_any_host_fn_error() {
  std::exception_ptr error;
  {
    auto& errors = pending();
    std::lock_guard lock(errors.mutex);
    if (errors.by_stream.empty()) return;
    error = errors.by_stream.begin()->second;
    errors.by_stream.erase(errors.by_stream.begin());
  }
  std::rethrow_exception(error);
}

bool has_host_fn_error(StreamView stream) {
  auto& errors = pending();
  std::lock_guard lock(errors.mutex);
  return errors.by_stream.contains(stream.get());
}

}  // namespace sluice
