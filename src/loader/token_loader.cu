// TokenLoader: windows of T + 1 tokens read from the shards into pinned
// slots, copied over at their width (2 bytes a token for uint16 shards), and
// widened on the GPU into int32 inputs and targets: the ring's transform, on
// its copy stream (loader_ring.hpp).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>

#include "io/read_fully.hpp"
#include "loader/cuda_loader.hpp"
#include "sluice/core/error.hpp"
#include "sluice/loader/token_windows.hpp"

namespace sluice {

namespace {

template <typename Token>
__global__ void widen(const Token* __restrict__ raw, std::int32_t* __restrict__ inputs, std::int32_t* __restrict__ targets,
                      std::size_t rows, std::size_t seq) {
  const std::size_t n = rows * seq;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t row = i / seq, t = i % seq;
    const Token* window = raw + row * (seq + 1);
    inputs[i] = static_cast<std::int32_t>(window[t]);
    targets[i] = static_cast<std::int32_t>(window[t + 1]);
  }
}

// The shards' files, open for the loader's life; pread from many threads.
struct OpenShards {
  explicit OpenShards(const std::vector<TokenShard>& shards) {
    for (const auto& s : shards) {
      const int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        for (int open_fd : fds) ::close(open_fd);
        throw ShardError(s.path + ": cannot open for reading: " + std::strerror(errno));
      }
      fds.push_back(fd);
    }
  }
  ~OpenShards() {
    for (int fd : fds) ::close(fd);
  }
  std::vector<int> fds;
};

}  // namespace

TokenLoader::TokenLoader(const std::vector<std::string>& files_or_patterns, std::size_t seq, LoaderOptions options)
    : seq_(seq) {
  auto windows = std::make_shared<TokenWindows>(open_shards(files_or_patterns), seq);
  windows_ = windows->count();
  token_bytes_ = windows->shards().front().token_bytes;
  BatchPlan plan(windows_, {options.batch, options.shuffle, options.seed, options.rank, options.world, options.drop_last});
  auto files = std::make_shared<OpenShards>(windows->shards());
  const std::size_t width = token_bytes_, batch = options.batch;
  detail::LoaderSource spec;
  spec.row_bytes = (seq + 1) * width;
  spec.out_row_bytes = 2 * seq * sizeof(std::int32_t);
  spec.read_row = [windows, files, width, seq](std::size_t item, std::byte* row) {
    const TokenWindow w = windows->window(item);
    const TokenShard& shard = windows->shards()[w.shard];
    const std::uint64_t offset = shard.data_offset() + std::uint64_t{w.first_token} * width;
    const std::size_t bytes = (seq + 1) * width;
    const detail::ReadOutcome r = detail::read_fully(files->fds[w.shard], row, bytes, offset);
    if (r.done < bytes)
      throw ShardError(shard.path + ": read of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                       (r.error != 0 ? std::string(" failed: ") + std::strerror(r.error)
                                     : " ended early: the file is shorter than its header says (truncated while in use?)"));
  };
  // Inputs first, then targets, each `batch` rows long whatever the rows of this batch.
  spec.transform = [width, seq, batch](void* lane, const std::byte* raw, std::byte* out, std::size_t rows) {
    const auto stream = static_cast<cudaStream_t>(lane);
    auto* inputs = reinterpret_cast<std::int32_t*>(out);
    std::int32_t* targets = inputs + batch * seq;
    const std::size_t n = rows * seq;
    const auto blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 4096));
    if (width == 2)
      widen<<<blocks, 256, 0, stream>>>(reinterpret_cast<const std::uint16_t*>(raw), inputs, targets, rows, seq);
    else
      widen<<<blocks, 256, 0, stream>>>(reinterpret_cast<const std::uint32_t*>(raw), inputs, targets, rows, seq);
    SLUICE_CUDA_CHECK(cudaGetLastError());
  };
  engine_ = std::make_unique<detail::CudaLoader>(std::move(plan), std::move(spec), options);
}

TokenLoader::~TokenLoader() = default;
TokenLoader::TokenLoader(TokenLoader&&) noexcept = default;
TokenLoader& TokenLoader::operator=(TokenLoader&&) noexcept = default;

TokenBatch TokenLoader::next(StreamView stream) {
  const auto taken = engine_->next(stream);
  const auto* inputs = reinterpret_cast<const std::int32_t*>(taken.data);
  const std::size_t stride = engine_->plan().options().batch * seq_;
  return {{inputs, taken.rows * seq_}, {inputs + stride, taken.rows * seq_}, taken.rows, seq_, taken.position,
          taken.last_of_epoch};
}

LoaderState TokenLoader::state() const { return engine_->state(); }
const BatchPlan& TokenLoader::plan() const { return engine_->plan(); }
IdleReport TokenLoader::idle() const { return engine_->idle(); }
std::size_t TokenLoader::batches_per_epoch() const { return engine_->plan().batches_per_epoch(); }
std::size_t TokenLoader::windows() const { return windows_; }
std::size_t TokenLoader::token_bytes() const { return token_bytes_; }

}  // namespace sluice
