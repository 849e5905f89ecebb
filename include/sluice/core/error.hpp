#pragma once
// Every CUDA runtime call in sluice goes through SLUICE_CUDA_CHECK, which
// throws sluice::CudaError naming the call, the CUDA error and file:line.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace sluice {

class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, std::string_view call, std::string_view file, int line);
  // The same failure with context put in front, e.g. "chunk 7, stage compute".
  CudaError(const CudaError& cause, std::string_view context);

  cudaError_t code() const noexcept { return code_; }

 private:
  CudaError(cudaError_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  cudaError_t code_;
};

// Errors that break the CUDA context for good (a faulting kernel): every
// later call in the process fails with them.
bool is_sticky_error(cudaError_t code) noexcept;

namespace detail {
inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
  if (code == cudaSuccess) return;
  // The error now travels in the exception; clear the runtime's copy so a
  // later cudaGetLastError() after a kernel launch does not report it again.
  (void)cudaGetLastError();
  throw CudaError(code, call, file, line);
}
}  // namespace detail

}  // namespace sluice

#define SLUICE_CUDA_CHECK(call) ::sluice::detail::check_cuda((call), #call, __FILE__, __LINE__)

// For destructors, which must not throw: report and carry on. A sticky error
// is reported once per process, not once per resource released after it.
#define SLUICE_CUDA_CHECK_NOTHROW(call) ::sluice::detail::report_cuda((call), #call, __FILE__, __LINE__)

namespace sluice::detail {
void report_cuda(cudaError_t code, const char* call, const char* file, int line) noexcept;
}
