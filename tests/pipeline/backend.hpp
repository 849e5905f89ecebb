#pragma once
// Where a pipeline test runs: on a GPU (tests/gpu/cuda_backend.cu) or on
// the host executor (tests/host/host_backend.cpp). One test body then
// checks the pipeline's logic in CI, where there is no GPU, and on a GPU
// for real. A backend makes pipelines on its executor, gives memory its
// executor counts as page-locked, and runs the few computes the tests use:
// kernels on the chunk's stream, or loops on the host executor's compute
// lanes. Host-only: no CUDA header.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "sluice/multigpu/multi_pipeline.hpp"
#include "sluice/pipeline/pipeline.hpp"

namespace sluice::test {

// Something a backend holds for a test until it goes: a registration, an allocation.
class Held {
 public:
  virtual ~Held() = default;
};

class PinnedBytes : public Held {
 public:
  virtual std::byte* data() const = 0;
};

// Page-locked host memory of `count` items, as the backend's executor sees it
// (cudaHostAlloc; HostExecutor::allocate_pinned). Move-only.
template <typename T>
class Pinned {
 public:
  Pinned(std::unique_ptr<PinnedBytes> bytes, std::size_t count) : bytes_(std::move(bytes)), count_(count) {}
  T* data() const { return reinterpret_cast<T*>(bytes_->data()); }
  std::size_t size() const { return count_; }
  std::span<T> span() const { return {data(), count_}; }
  T* begin() const { return data(); }
  T* end() const { return data() + count_; }
  T& operator[](std::size_t i) const { return data()[i]; }

 private:
  std::unique_ptr<PinnedBytes> bytes_;
  std::size_t count_;
};

// Memory the computes may keep state in from chunk to chunk (a running
// sum's carry): device memory on a GPU.
class DeviceBytes : public Held {
 public:
  virtual void* data() const = 0;
  // Copies it to the host once the work that writes it is done.
  virtual void read(void* to, std::size_t bytes) const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Why this backend cannot run here (no GPU); empty when it can.
  virtual std::string unavailable() const { return {}; }

  virtual Pipeline pipeline(const PipelineOptions& options = {}) = 0;
  // A pipeline of `parts` parts; 0 parts is refused as MultiPipeline refuses it.
  virtual MultiPipeline multi(std::size_t parts, const PipelineOptions& options = {}) = 0;

  template <typename T>
  Pinned<T> pinned(std::size_t count) {
    return Pinned<T>(allocate_pinned(std::max<std::size_t>(count, 1) * sizeof(T)), count);
  }
  // [data, data + bytes) page-locked until the returned object goes, as
  // sluice::HostRegistration does: the pipeline then copies it directly.
  virtual std::unique_ptr<Held> register_memory(const void* data, std::size_t bytes) = 0;
  // `bytes` of zeroed memory the computes may use.
  virtual std::unique_ptr<DeviceBytes> device_zeroed(std::size_t bytes) = 0;
  virtual std::size_t free_device_bytes() const = 0;

  // The computes, each over the chunk's c.size() items: launched on
  // c.stream on a GPU, run in place on the host executor.
  // out[i] = in[i] * scale + offset (in and out may be the same).
  virtual void affine(const Chunk& c, const float* in, float* out, float scale, float offset) = 0;
  // The same after waiting `microseconds`: it reads its input late, so a
  // slot overwritten too early shows in the output.
  virtual void late_affine(const Chunk& c, double microseconds, const float* in, float* out, float scale,
                           float offset) = 0;
  // sum[i] = a[i] + b[i] in double, product[i] = a[i] * b[i] in float.
  virtual void mixed(const Chunk& c, const float* a, const int* b, double* sum, float* product) = 0;
  // In order: out[i] = (*carry += in[i]). State from chunk to chunk.
  virtual void running_sum(const Chunk& c, const std::int64_t* in, std::int64_t* out, std::int64_t* carry) = 0;

  // Once a test's pipelines are gone: what the backend can check of what
  // they left (memory held, threads, edges broken). Adds test failures.
  virtual void expect_clean() const {}

 protected:
  virtual std::unique_ptr<PinnedBytes> allocate_pinned(std::size_t bytes) = 0;
};

}  // namespace sluice::test
