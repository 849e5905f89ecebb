#include "sluice/pipeline/pipeline_options.hpp"

#include <stdexcept>
#include <string>

namespace sluice {

unsigned compute_stream_count(const PipelineOptions& options) {
  const bool in_order = options.kernel_order == KernelOrder::in_chunk_order;
  if (options.compute_streams == 0) return in_order ? 1 : 2;
  if (in_order && options.compute_streams > 1)
    throw std::invalid_argument("compute_streams = " + std::to_string(options.compute_streams) +
                                " would run kernels out of chunk order: set kernel_order = KernelOrder::independent "
                                "if each chunk's kernel stands alone");
  return options.compute_streams;
}

}  // namespace sluice
