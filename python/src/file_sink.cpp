// The durable file sink (sluice/pipeline/file_io.hpp) for sluice.save_file
// (sluice/checkpoint_save.py): a file of `bytes` bytes written in pieces from
// host memory, from any number of threads at once, then synced and renamed
// over its target; a save that fails is abandoned and the target stays as it
// was. One item is one byte, so that a piece's offset is the file's own, and
// the header is written as pieces too (a sink with FileOptions::offset would
// keep the header of the file it replaces).
//
// _DeviceWrites carries a save's CUDA tensors into the sink through a ring to
// the host (io/file_writes.hpp): the copy of chunk i + 1 off the device while
// the writers write chunk i. On device -1 the ring runs on the host executor
// over host memory (what CI tests without a GPU).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "io/file_writes.hpp"
#include "ring/cuda_ring_executor.hpp"
#include "ring/host_ring_executor.hpp"
#include "ring/ring.hpp"
#include "sluice/pipeline/file_io.hpp"

namespace py = pybind11;

namespace sluice::python {

namespace {

void write_piece(FileSink& sink, std::uint64_t offset, const std::byte* data, std::size_t length) {
  if (length == 0) return;
  sink.write({static_cast<std::size_t>(offset), static_cast<std::size_t>(offset) + length}, {data, length});
}

// (device address, bytes, file offset)
using RangeRow = std::tuple<std::uintptr_t, std::size_t, std::uint64_t>;

class DeviceWrites {
 public:
  std::uint64_t written() const { return written_; }

  void run(FileSink& sink, int device, std::uintptr_t stream, const std::vector<RangeRow>& rows, std::size_t chunk_bytes,
           std::size_t staging, unsigned threads) {
    std::vector<ring::DeviceRange> ranges;
    for (const auto& [address, bytes, offset] : rows)
      ranges.push_back({reinterpret_cast<const std::byte*>(address), bytes, offset});
    const ring::FileWriteOptions options{chunk_bytes, staging, threads};
    const auto write = [&sink](std::uint64_t offset, std::span<const std::byte> bytes) {
      write_piece(sink, offset, bytes.data(), bytes.size());
    };
    // The writers sleep on each copy rather than spin: a background save shares the CPU with training.
    std::unique_ptr<ring::RingExecutor> executor;
    if (device < 0)
      executor = std::make_unique<ring::HostRingExecutor>();
    else
      executor = std::make_unique<ring::CudaRingExecutor>(device, 0, ring::StagingWait::sleep);
    try {
      ring::write_device_ranges(ranges, *executor, {reinterpret_cast<void*>(stream)}, write, options, written_);
    } catch (const ring::RingError& e) {
      // A write's own error (an IoError naming the file and offset) says more than the chunk's.
      if (e.cause()) std::rethrow_exception(e.cause());
      throw;
    }
  }

 private:
  std::atomic<std::uint64_t> written_{0};
};

}  // namespace

void bind_file_sink(py::module_& m) {
  py::class_<DeviceWrites>(m, "_DeviceWrites")
      .def(py::init<>())
      .def_property_readonly("written", &DeviceWrites::written)
      // `rows`: (address, bytes, file offset) of device memory on `device` the caller keeps until
      // this returns; the copies run after the work enqueued on `stream` (a cudaStream_t) so far.
      .def(
          "run",
          [](DeviceWrites& w, FileSink& sink, int device, std::uintptr_t stream, const std::vector<RangeRow>& rows,
             std::size_t chunk_bytes, std::size_t staging, unsigned threads) {
            py::gil_scoped_release release;
            w.run(sink, device, stream, rows, chunk_bytes, staging, threads);
          },
          py::arg("sink"), py::arg("device"), py::arg("stream"), py::arg("rows"), py::arg("chunk_bytes"),
          py::arg("staging"), py::arg("threads"));

  py::class_<FileSink>(m, "_FileSink")
      .def(py::init([](const std::string& path, std::size_t bytes, bool direct) {
             FileOptions options;
             options.direct = direct;
             return std::make_unique<FileSink>(path, 1, bytes, options);
           }),
           py::arg("path"), py::arg("bytes"), py::arg("direct") = false)
      .def_property_readonly("bytes", &FileSink::item_count)
      .def("begin", [](FileSink& s) {
        py::gil_scoped_release release;
        s.begin_run();
      })
      // `address` is host memory the caller keeps alive and unchanged until the call returns;
      // the GIL is released for the write, so that several threads write at once.
      .def(
          "write",
          [](FileSink& s, std::uint64_t offset, std::uintptr_t address, std::size_t length) {
            py::gil_scoped_release release;
            write_piece(s, offset, reinterpret_cast<const std::byte*>(address), length);
          },
          py::arg("offset"), py::arg("address"), py::arg("length"))
      .def(
          "write",
          [](FileSink& s, std::uint64_t offset, const py::bytes& data) {
            const std::string_view view = data;  // the bytes object holds the memory while the GIL is off
            py::gil_scoped_release release;
            write_piece(s, offset, reinterpret_cast<const std::byte*>(view.data()), view.size());
          },
          py::arg("offset"), py::arg("data"))
      .def("commit", [](FileSink& s) {
        py::gil_scoped_release release;
        s.commit();
      })
      // Not in place, so the items done do not matter: the new file is removed.
      .def("abandon", [](FileSink& s) { s.abandon(0); });
}

}  // namespace sluice::python
