#pragma once
// Page-locked host memory that the copy engines read and write directly,
// which is what lets a cudaMemcpyAsync overlap with kernels. Move-only.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include "sluice/core/error.hpp"

namespace sluice {

template <typename T>
class PinnedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "PinnedBuffer holds raw bytes: T must be trivially copyable");

 public:
  PinnedBuffer() = default;
  // cudaHostAllocPortable: usable from every device, not only the current one.
  explicit PinnedBuffer(std::size_t count, unsigned flags = cudaHostAllocPortable) : size_(count) {
    if (count == 0) return;
    void* raw = nullptr;
    SLUICE_CUDA_CHECK(cudaHostAlloc(&raw, count * sizeof(T), flags));
    data_ = static_cast<T*>(raw);
  }
  ~PinnedBuffer() { release(); }
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  T* begin() noexcept { return data_; }
  T* end() noexcept { return data_ + size_; }
  const T* begin() const noexcept { return data_; }
  const T* end() const noexcept { return data_ + size_; }
  std::span<T> span() noexcept { return {data_, size_}; }
  std::span<const T> span() const noexcept { return {data_, size_}; }

 private:
  void release() noexcept {
    if (data_ != nullptr) SLUICE_CUDA_CHECK_NOTHROW(cudaFreeHost(data_));
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace sluice
