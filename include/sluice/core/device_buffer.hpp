#pragma once
// Device memory allocated and freed in stream order (cudaMallocAsync /
// cudaFreeAsync): the buffer remembers the stream it lives on, and neither
// allocation nor release synchronises the device. Move-only.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <type_traits>
#include <utility>

#include "sluice/core/error.hpp"
#include "sluice/core/stream_view.hpp"

namespace sluice {

template <typename T>
class DeviceBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "DeviceBuffer holds raw bytes: T must be trivially copyable");

 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t count, StreamView stream) : size_(count), stream_(stream) {
    if (count == 0) return;
    void* raw = nullptr;
    SLUICE_CUDA_CHECK(cudaMallocAsync(&raw, count * sizeof(T), stream.get()));
    data_ = static_cast<T*>(raw);
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), stream_(other.stream_) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      stream_ = other.stream_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }
  StreamView stream() const noexcept { return stream_; }

 private:
  void release() noexcept {
    if (data_ != nullptr) SLUICE_CUDA_CHECK_NOTHROW(cudaFreeAsync(data_, stream_.get()));
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
  StreamView stream_;
};

}  // namespace sluice
