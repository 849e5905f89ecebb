#include "host_backend.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "pipeline_test.hpp"

namespace sluice::test {

namespace {

class HostPinned final : public PinnedBytes {
 public:
  explicit HostPinned(HostExecutor::Buffer buffer) : buffer_(std::move(buffer)) {}
  std::byte* data() const override { return buffer_.data(); }

 private:
  HostExecutor::Buffer buffer_;
};

class HostRegistered final : public Held {
 public:
  explicit HostRegistered(HostExecutor::Registration r) : registration_(std::move(r)) {}

 private:
  HostExecutor::Registration registration_;
};

// The host executor's computes read and write host memory: so does their state.
class HostBytes final : public DeviceBytes {
 public:
  explicit HostBytes(std::size_t bytes) : bytes_(bytes) {}
  void* data() const override { return const_cast<std::byte*>(bytes_.data()); }
  void read(void* to, std::size_t bytes) const override { std::memcpy(to, bytes_.data(), bytes); }

 private:
  std::vector<std::byte> bytes_;
};

}  // namespace

HostBackend::HostBackend(HostExecutorOptions options) : options_(options), host_(options) {}

Pipeline HostBackend::pipeline(const PipelineOptions& options) { return Pipeline(options, host_); }

MultiPipeline HostBackend::multi(std::size_t parts, const PipelineOptions& options) {
  return MultiPipeline::on_host(std::vector<HostExecutor>(parts, host_), options);
}

std::unique_ptr<PinnedBytes> HostBackend::allocate_pinned(std::size_t bytes) {
  return std::make_unique<HostPinned>(host_.allocate_pinned(bytes));
}

std::unique_ptr<Held> HostBackend::register_memory(const void* data, std::size_t bytes) {
  return std::make_unique<HostRegistered>(host_.register_memory(data, bytes));
}

std::unique_ptr<DeviceBytes> HostBackend::device_zeroed(std::size_t bytes) { return std::make_unique<HostBytes>(bytes); }

std::size_t HostBackend::free_device_bytes() const { return options_.device_bytes - host_.holdings().device_bytes; }

void HostBackend::affine(const Chunk& c, const float* in, float* out, float scale, float offset) {
  for (std::size_t i = 0; i < c.size(); ++i) out[i] = in[i] * scale + offset;
}

void HostBackend::late_affine(const Chunk& c, double microseconds, const float* in, float* out, float scale,
                              float offset) {
  std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(microseconds));
  affine(c, in, out, scale, offset);
}

void HostBackend::mixed(const Chunk& c, const float* a, const int* b, double* sum, float* product) {
  for (std::size_t i = 0; i < c.size(); ++i) {
    sum[i] = static_cast<double>(a[i]) + b[i];
    product[i] = a[i] * static_cast<float>(b[i]);
  }
}

void HostBackend::running_sum(const Chunk& c, const std::int64_t* in, std::int64_t* out, std::int64_t* carry) {
  std::int64_t sum = *carry;
  for (std::size_t i = 0; i < c.size(); ++i) out[i] = sum += in[i];
  *carry = sum;
}

void HostBackend::expect_clean() const {
  const std::vector<std::string> broken = host_.violations();
  EXPECT_TRUE(broken.empty()) << "the host executor saw the schedule broken " << broken.size()
                              << " time(s); the first: " << (broken.empty() ? "" : broken.front());
  const HostExecutor::Holdings h = host_.holdings();
  EXPECT_EQ(h.device_bytes, 0u) << "slot memory left after every pipeline is gone";
  EXPECT_EQ(h.pinned_bytes, 0u) << "pinned memory left after every pipeline and buffer is gone";
  EXPECT_EQ(h.locked_ranges, 0u) << "memory left page-locked";
  EXPECT_EQ(h.lane_threads, 0u) << "lane threads left running";
}

// Every pipeline test of tests/pipeline, on the host executor, each
// operation held back a random 0-20 us so that the lanes meet in other
// orders than they would running flat out (the matrix runs both ways).
namespace {
std::unique_ptr<Backend> make_host_backend() {
  return std::make_unique<HostBackend>(HostExecutorOptions{.jitter_us = 20, .seed = 42});
}
}  // namespace
SLUICE_INSTANTIATE_PIPELINE_TESTS(Host, (BackendKind{"host", &make_host_backend}));

}  // namespace sluice::test
