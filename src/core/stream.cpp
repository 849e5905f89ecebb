#include "sluice/core/stream.hpp"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "sluice/core/error.hpp"
#include "sluice/core/event.hpp"
#include "sluice/core/host_fn.hpp"

namespace sluice {

void StreamView::synchronize() const {
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(get()));
  rethrow_host_fn_error(*this);
}

bool StreamView::ready() const {
  const cudaError_t code = cudaStreamQuery(get());
  if (code == cudaErrorNotReady) return false;
  SLUICE_CUDA_CHECK(code);
  return true;
}

void StreamView::wait(const Event& event) const { SLUICE_CUDA_CHECK(cudaStreamWaitEvent(get(), event.get(), 0)); }

int StreamView::priority() const {
  int priority = 0;
  SLUICE_CUDA_CHECK(cudaStreamGetPriority(get(), &priority));
  return priority;
}

Stream::Stream(int priority, StreamFlags flags) : priority_(priority) {
  int least = 0, greatest = 0;
  SLUICE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  if (priority < greatest || priority > least)
    throw std::invalid_argument("stream priority " + std::to_string(priority) + " is outside this device's range [" +
                                std::to_string(greatest) + " (highest), " + std::to_string(least) + " (lowest)]");
  const unsigned raw_flags = flags == StreamFlags::non_blocking ? cudaStreamNonBlocking : cudaStreamDefault;
  SLUICE_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, raw_flags, priority));
}

Stream::~Stream() { release(); }

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), priority_(other.priority_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    release();
    stream_ = std::exchange(other.stream_, nullptr);
    priority_ = other.priority_;
  }
  return *this;
}

void Stream::release() noexcept {
  if (stream_ == nullptr) return;
  // Work already enqueued still completes after the handle is freed; host
  // functions still queued are waited for first, so that an exception one
  // raises is reported here rather than lost.
  if (const auto error = settle_host_fns(view())) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sluice: a host function's exception was never collected before its stream died: %s\n",
                   e.what());
    } catch (...) {
      std::fprintf(stderr, "sluice: a host function's exception was never collected before its stream died\n");
    }
  }
  SLUICE_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_));
  stream_ = nullptr;
}

}  // namespace sluice
