// RecordLoader: fixed-size records read into pinned slots and copied over as they are (loader_ring.hpp).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "io/read_fully.hpp"
#include "loader/cuda_loader.hpp"
#include "sluice/core/io_error.hpp"

namespace sluice {

namespace {
struct OpenFile {
  explicit OpenFile(const std::string& p) : path(p), fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd < 0) throw IoError(path, 0, std::string("cannot open for reading: ") + std::strerror(errno));
  }
  ~OpenFile() { ::close(fd); }
  std::string path;
  int fd;
};
}  // namespace

RecordLoader::RecordLoader(const std::string& file, std::size_t record_bytes, LoaderOptions options, RecordFile layout)
    : record_bytes_(record_bytes) {
  const std::uint64_t header_bytes = layout.header_bytes;
  if (record_bytes == 0) throw std::invalid_argument("record loader: records must be at least 1 byte");
  auto open = std::make_shared<OpenFile>(file);
  struct stat st {};
  if (fstat(open->fd, &st) != 0) throw IoError(file, 0, std::string("cannot stat: ") + std::strerror(errno));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  const std::uint64_t body = size > header_bytes ? size - header_bytes : 0;
  records_ = static_cast<std::size_t>(body / record_bytes);
  trailing_bytes_ = static_cast<std::size_t>(body % record_bytes);
  if (records_ == 0)
    throw IoError(file, size, "holds no whole record of " + std::to_string(record_bytes) + " bytes after " +
                                  std::to_string(header_bytes) + " header bytes");
  if (trailing_bytes_ != 0 && !layout.ignore_partial_record)
    throw IoError(file, header_bytes + records_ * std::uint64_t{record_bytes},
                  "ends in a partial record: " + std::to_string(body) + " bytes after the " + std::to_string(header_bytes) +
                      "-byte header are " + std::to_string(records_) + " records of " + std::to_string(record_bytes) +
                      " bytes and " + std::to_string(trailing_bytes_) +
                      " bytes more (RecordFile::ignore_partial_record takes the whole records and leaves them)");
  BatchPlan plan(records_, {options.batch, options.shuffle, options.seed, options.rank, options.world, options.drop_last});
  detail::LoaderSource spec;
  spec.row_bytes = record_bytes;
  spec.read_row = [open, record_bytes, header_bytes](std::size_t item, std::byte* row) {
    const std::uint64_t offset = header_bytes + std::uint64_t{item} * record_bytes;
    const detail::ReadOutcome r = detail::read_fully(open->fd, row, record_bytes, offset);
    if (r.done < record_bytes)
      throw IoError(open->path, offset + r.done,
                    "read of record " + std::to_string(item) + " at offset " + std::to_string(offset) +
                        (r.error != 0 ? std::string(" failed: ") + std::strerror(r.error)
                                      : " ended early (truncated while in use?)"));
  };
  engine_ = std::make_unique<detail::CudaLoader>(std::move(plan), std::move(spec), options);
}

RecordLoader::~RecordLoader() = default;
RecordLoader::RecordLoader(RecordLoader&&) noexcept = default;
RecordLoader& RecordLoader::operator=(RecordLoader&&) noexcept = default;

RecordBatch RecordLoader::next(StreamView stream) {
  const auto taken = engine_->next(stream);
  return {{taken.data, taken.rows * record_bytes_}, taken.rows, record_bytes_, taken.position, taken.last_of_epoch};
}

LoaderState RecordLoader::state() const { return engine_->state(); }
IdleReport RecordLoader::idle() const { return engine_->idle(); }
std::size_t RecordLoader::batches_per_epoch() const { return engine_->plan().batches_per_epoch(); }

}  // namespace sluice
