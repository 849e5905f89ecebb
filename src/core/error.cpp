#include "sluice/core/error.hpp"

#include <atomic>
#include <cstdio>

namespace sluice {

namespace {
// Set once a sticky error has reached the caller in a CudaError: releasing
// resources after it then fails quietly, since the caller already knows why.
std::atomic<bool> sticky_error_raised{false};

std::string describe(cudaError_t code, std::string_view call, std::string_view file, int line) {
  std::string message(call);
  message += " failed: ";
  message += cudaGetErrorName(code);
  message += " (";
  message += cudaGetErrorString(code);
  message += ") at ";
  message += file;
  message += ':';
  message += std::to_string(line);
  return message;
}
}  // namespace

CudaError::CudaError(cudaError_t code, std::string_view call, std::string_view file, int line)
    : CudaError(code, describe(code, call, file, line)) {
  if (is_sticky_error(code)) sticky_error_raised = true;
}

CudaError::CudaError(const CudaError& cause, std::string_view context)
    : CudaError(cause.code(), std::string(context) + ": " + cause.what()) {}

bool is_sticky_error(cudaError_t code) noexcept {
  switch (code) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed: return true;
    default: return false;
  }
}

namespace detail {
void report_cuda(cudaError_t code, const char* call, const char* file, int line) noexcept {
  if (code == cudaSuccess) return;
  (void)cudaGetLastError();
  if (is_sticky_error(code)) {
    static std::atomic<bool> reported{false};
    if (sticky_error_raised || reported.exchange(true)) return;
    std::fprintf(stderr,
                 "sluice: releasing CUDA resources fails from here on: %s (%s), first seen at %s in a destructor "
                 "(%s:%d); later failures of the same kind are not reported\n",
                 cudaGetErrorName(code), cudaGetErrorString(code), call, file, line);
    return;
  }
  std::fprintf(stderr, "sluice: %s failed in a destructor: %s (%s) at %s:%d\n", call, cudaGetErrorName(code),
               cudaGetErrorString(code), file, line);
}
}  // namespace detail

}  // namespace sluice
