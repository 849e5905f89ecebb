#include "sluice/error.hpp"

#include <cstdio>

namespace sluice {

namespace {
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
    : CudaError(code, describe(code, call, file, line)) {}

CudaError::CudaError(const CudaError& cause, std::string_view context)
    : CudaError(cause.code(), std::string(context) + ": " + cause.what()) {}

namespace detail {
void report_cuda(cudaError_t code, const char* call, const char* file, int line) noexcept {
  if (code == cudaSuccess) return;
  (void)cudaGetLastError();
  std::fprintf(stderr, "sluice: %s failed in a destructor: %s (%s) at %s:%d\n", call, cudaGetErrorName(code),
               cudaGetErrorString(code), file, line);
}
}  // namespace detail

}  // namespace sluice
