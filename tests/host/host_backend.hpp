#pragma once
// The pipeline tests' backend on the host executor: pipelines whose
// schedule runs on host threads over host memory, every edge checked as it
// runs, and the computes as plain loops on the executor's compute lanes.
// After a test it checks that the executor saw no edge broken and holds
// nothing: no slot memory, no page-locked range, no lane thread.
#include <memory>

#include "backend.hpp"
#include "sluice/pipeline/host_executor.hpp"

namespace sluice::test {

class HostBackend final : public Backend {
 public:
  explicit HostBackend(HostExecutorOptions options = {});
  std::string name() const override { return "the host executor"; }
  const HostExecutor& executor() const { return host_; }
  HostExecutor& executor() { return host_; }

  Pipeline pipeline(const PipelineOptions& options = {}) override;
  MultiPipeline multi(std::size_t parts, const PipelineOptions& options = {}) override;
  std::unique_ptr<Held> register_memory(const void* data, std::size_t bytes) override;
  std::unique_ptr<DeviceBytes> device_zeroed(std::size_t bytes) override;
  std::size_t free_device_bytes() const override;

  void affine(const Chunk& c, const float* in, float* out, float scale, float offset) override;
  void late_affine(const Chunk& c, double microseconds, const float* in, float* out, float scale,
                   float offset) override;
  void mixed(const Chunk& c, const float* a, const int* b, double* sum, float* product) override;
  void running_sum(const Chunk& c, const std::int64_t* in, std::int64_t* out, std::int64_t* carry) override;

  void expect_clean() const override;

 protected:
  std::unique_ptr<PinnedBytes> allocate_pinned(std::size_t bytes) override;

 private:
  HostExecutorOptions options_;
  HostExecutor host_;
};

}  // namespace sluice::test
