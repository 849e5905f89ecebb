#pragma once
// Page-locks existing host memory (cudaHostRegister) for as long as the
// object lives, so the copy engines can DMA it without a staging copy.
// Registration costs about 40-50 ms per GiB on 4 KiB pages (docs/design.md): worth it
// for memory that is copied many times, not for a single pass. Move-only.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace sluice {

class HostRegistration {
 public:
  HostRegistration() = default;
  // Throws std::invalid_argument for a null pointer or zero bytes, CudaError
  // when the driver refuses (e.g. the range is already registered).
  HostRegistration(void* ptr, std::size_t bytes, unsigned flags = cudaHostRegisterPortable);
  ~HostRegistration();
  HostRegistration(HostRegistration&& other) noexcept;
  HostRegistration& operator=(HostRegistration&& other) noexcept;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;

  void* data() const noexcept { return ptr_; }
  std::size_t bytes() const noexcept { return bytes_; }

  // True when [ptr, ptr + bytes) lies inside one live HostRegistration.
  static bool covers(const void* ptr, std::size_t bytes);
  // The number of the live HostRegistration that holds [ptr, ptr + bytes),
  // 0 when none does. Every registration gets a new one, so memory
  // registered again at the same address is told apart from before.
  static std::uint64_t number_covering(const void* ptr, std::size_t bytes);

 private:
  void release() noexcept;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace sluice
