// MultiPipeline over GPUs: the devices are checked before anything else.
#include <stdexcept>
#include <string>

#include "sluice/core/error.hpp"
#include "sluice/multigpu/multi_pipeline.hpp"

namespace sluice {

MultiPipeline::MultiPipeline(std::vector<int> devices, PipelineOptions options)
    : devices_(std::move(devices)), options_(options), generation_(detail::new_span_generation()) {
  if (devices_.empty()) throw std::invalid_argument("MultiPipeline: no device");
  int count = 0;
  SLUICE_CUDA_CHECK(cudaGetDeviceCount(&count));
  for (int d : devices_)
    if (d < 0 || d >= count)
      throw std::invalid_argument("MultiPipeline: device " + std::to_string(d) + " does not exist (" + std::to_string(count) +
                                  " present)");
  weights_.assign(devices_.size(), 1.0);
  make_part_ = [devices = devices_](std::size_t p, PipelineOptions o) {
    o.device = devices[p];
    return std::make_unique<Pipeline>(o);
  };
}

}  // namespace sluice
