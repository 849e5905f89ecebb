// The durable file sink (sluice/pipeline/file_io.hpp) for sluice.save_file
// (sluice/checkpoint_save.py): a file of `bytes` bytes written in pieces from
// host memory, from any number of threads at once, then synced and renamed
// over its target; a save that fails is abandoned and the target stays as it
// was. One item is one byte, so that a piece's offset is the file's own, and
// the header is written as pieces too (a sink with FileOptions::offset would
// keep the header of the file it replaces).
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "bindings.hpp"
#include "sluice/pipeline/file_io.hpp"

namespace py = pybind11;

namespace sluice::python {

namespace {

void write_piece(FileSink& sink, std::uint64_t offset, const std::byte* data, std::size_t length) {
  if (length == 0) return;
  sink.write({static_cast<std::size_t>(offset), static_cast<std::size_t>(offset) + length}, {data, length});
}

}  // namespace

void bind_file_sink(py::module_& m) {
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
