// The pipeline tests' backend on a GPU: pipelines on the current device,
// page-locked memory from cudaHostAlloc and cudaHostRegister, and the
// computes as kernels on the chunk's stream. Every test of tests/pipeline
// runs here on the GPU, as it runs on the host executor in tests/host.
#include <memory>
#include <vector>

#include "backend.hpp"
#include "pipeline_test.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/host_registration.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "test_kernels.cuh"

namespace sluice::test {

namespace {

__global__ void mixed_kernel(const float* a, const int* b, double* sum, float* product, std::size_t n) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < n) {
    sum[i] = static_cast<double>(a[i]) + b[i];
    product[i] = a[i] * static_cast<float>(b[i]);
  }
}

class CudaPinned final : public PinnedBytes {
 public:
  explicit CudaPinned(std::size_t bytes) : buffer_(bytes) {}
  std::byte* data() const override { return const_cast<std::byte*>(buffer_.data()); }

 private:
  PinnedBuffer<std::byte> buffer_;
};

class CudaRegistered final : public Held {
 public:
  CudaRegistered(const void* data, std::size_t bytes) : registration_(const_cast<void*>(data), bytes) {}

 private:
  HostRegistration registration_;
};

class CudaDeviceBytes final : public DeviceBytes {
 public:
  explicit CudaDeviceBytes(std::size_t bytes) : buffer_(bytes, StreamView()) {
    SLUICE_CUDA_CHECK(cudaMemsetAsync(buffer_.data(), 0, bytes, buffer_.stream().get()));
    buffer_.stream().synchronize();  // zeroed before any pipeline stream reads it
  }
  void* data() const override { return const_cast<std::byte*>(buffer_.data()); }
  void read(void* to, std::size_t bytes) const override {
    SLUICE_CUDA_CHECK(cudaMemcpy(to, buffer_.data(), bytes, cudaMemcpyDeviceToHost));
  }

 private:
  DeviceBuffer<std::byte> buffer_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    if (Device::count() > 0) Device(0).make_current();
  }
  std::string name() const override { return "GPU 0"; }
  std::string unavailable() const override {
    return Device::count() == 0 ? "no CUDA device: " + Device::unavailable_reason() : std::string();
  }

  Pipeline pipeline(const PipelineOptions& options) override { return Pipeline(options); }
  // The parts take the GPUs there are in turn; one GPU may hold several.
  MultiPipeline multi(std::size_t parts, const PipelineOptions& options) override {
    std::vector<int> devices;
    for (std::size_t k = 0; k < parts; ++k) devices.push_back(static_cast<int>(k % static_cast<std::size_t>(Device::count())));
    return MultiPipeline(devices, options);
  }

  std::unique_ptr<Held> register_memory(const void* data, std::size_t bytes) override {
    return std::make_unique<CudaRegistered>(data, bytes);
  }
  std::unique_ptr<DeviceBytes> device_zeroed(std::size_t bytes) override {
    return std::make_unique<CudaDeviceBytes>(bytes);
  }
  std::size_t free_device_bytes() const override {
    std::size_t free_bytes = 0, total = 0;
    SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes;
  }

  void affine(const Chunk& c, const float* in, float* out, float scale, float offset) override {
    launch_affine(c.stream, in, out, c.size(), scale, offset);
  }
  void late_affine(const Chunk& c, double microseconds, const float* in, float* out, float scale,
                   float offset) override {
    launch_late_affine(c.stream, microseconds, in, out, c.size(), scale, offset);
  }
  void mixed(const Chunk& c, const float* a, const int* b, double* sum, float* product) override {
    mixed_kernel<<<static_cast<unsigned>((c.size() + 255) / 256), 256, 0, c.stream.get()>>>(a, b, sum, product, c.size());
    SLUICE_CUDA_CHECK(cudaGetLastError());
  }
  void running_sum(const Chunk& c, const std::int64_t* in, std::int64_t* out, std::int64_t* carry) override {
    launch_running_sum(c.stream, in, out, c.size(), carry);
  }

 protected:
  std::unique_ptr<PinnedBytes> allocate_pinned(std::size_t bytes) override {
    return std::make_unique<CudaPinned>(bytes);
  }
};

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

}  // namespace

// Every pipeline test of tests/pipeline, on the GPU.
SLUICE_INSTANTIATE_PIPELINE_TESTS(Gpu, (BackendKind{"cuda", &make_cuda_backend}));

}  // namespace sluice::test
