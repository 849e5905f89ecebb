// Checkpoints (sluice/checkpoint.py): a safetensors file's header, checked
// before any GPU memory is taken, and byte ranges of a file read into device
// memory through the ring's staging slots (io/file_ranges.hpp). On device
// -1 the reads go to host memory on the host ring executor, so that the
// Python side is tested where there is no GPU.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "io/file_ranges.hpp"
#include "ring/cuda_ring_executor.hpp"
#include "ring/host_ring_executor.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/weights/checkpoint.hpp"
#include "weights/checkpoint_read.hpp"
#include "weights/safetensors_header.hpp"

namespace py = pybind11;

namespace sluice::python {

namespace {

py::dict header_dict(const weights::SafetensorsHeader& h) {
  py::list tensors;
  for (const auto& t : h.tensors)
    tensors.append(py::make_tuple(t.name, std::string(weights::to_string(t.dtype)), t.shape, t.begin, t.end));
  py::dict d;
  d["tensors"] = tensors;
  d["metadata"] = h.metadata;
  d["data_begin"] = h.data_begin;
  d["file_bytes"] = h.file_bytes;
  // Which file was read: (device, inode, size, mtime_ns).
  if (h.file) d["file"] = py::make_tuple(h.file->device, h.file->inode, h.file->size, h.file->mtime_ns);
  return d;
}

using RangeTuple = std::tuple<std::uint64_t, std::size_t, std::uintptr_t>;  // offset, bytes, address

std::vector<ring::FileRange> file_ranges(const std::vector<RangeTuple>& ranges) {
  std::vector<ring::FileRange> out;
  for (const auto& [offset, bytes, to] : ranges) out.push_back({offset, bytes, reinterpret_cast<std::byte*>(to)});
  return out;
}

ring::FileReadOptions read_options(std::size_t chunk_bytes, std::size_t staging, unsigned threads, bool direct) {
  ring::FileReadOptions o;
  o.chunk_bytes = chunk_bytes;
  o.staging = staging;
  o.threads = threads;
  o.direct = direct;
  return o;
}

// A lane's wait for its staging slot's last copy, by name (a bench compares them; none: the file reader's own).
ring::StagingWait staging_wait_named(const std::string& name) {
  if (name == "sleep") return ring::StagingWait::sleep;
  if (name == "nap") return ring::StagingWait::nap;
  if (name == "poll") return ring::StagingWait::poll;
  throw std::invalid_argument("staging_wait must be 'sleep', 'nap' or 'poll', not '" + name + "'");
}

// The reads' executors: a copy stream each on `device`, or, on device -1, the host ring executor.
ring::MakeExecutor executors(int device, unsigned jitter_us, ring::StagingWait wait = ring::file_read_staging_wait) {
  return [=](std::size_t lane) -> std::shared_ptr<ring::RingExecutor> {
    if (device >= 0) return std::make_shared<ring::CudaRingExecutor>(device, 0, wait);
    return std::make_shared<ring::HostRingExecutor>(ring::HostRingOptions{jitter_us, 1 + lane});
  };
}

py::dict report_dict(const ring::FileReadReport& report) {
  py::list lanes;
  for (const ring::LaneReport& l : report.lanes) {
    py::dict lane;
    lane["chunks"] = l.chunks;
    lane["bytes"] = l.bytes;
    lane["reading_seconds"] = l.reading_seconds;
    lane["putting_seconds"] = l.putting_seconds;
    lane["ring_made_seconds"] = l.ring_made_seconds;
    lane["started_seconds"] = l.started_seconds;
    lane["finished_seconds"] = l.finished_seconds;
    lanes.append(lane);
  }
  py::dict d;
  d["bytes"] = report.bytes;
  d["chunks"] = report.chunks;
  d["direct"] = report.direct;
  d["lanes"] = lanes;
  return d;
}

// A checkpoint's header as read from its file, handed back to _read_checkpoint: the reads must
// come from the file it was read from.
struct PlannedCheckpoint {
  std::string path;
  weights::SafetensorsHeader header;
};

}  // namespace

void bind_checkpoint(py::module_& m) {
  py::class_<PlannedCheckpoint>(m, "_PlannedCheckpoint")
      .def_property_readonly("header", [](const PlannedCheckpoint& p) { return header_dict(p.header); });
  m.def("_plan_checkpoint", [](const std::string& path) { return PlannedCheckpoint{path, weights::read_safetensors_header(path)}; },
        py::arg("path"), "the header, read and checked before any memory is taken");
  // load_checkpoint's reading (weights/checkpoint_read.hpp) into the caller's memory: tensor k
  // to addresses[k]. direct: True, False or None (load_checkpoint's automatic rule); chunk_bytes
  // None: its default. Device -1: host memory on the host ring executor, for tests.
  m.def(
      "_read_checkpoint",
      [](const PlannedCheckpoint& planned, const std::vector<std::uintptr_t>& addresses, int device, unsigned threads,
         std::optional<bool> direct, std::optional<std::size_t> chunk_bytes, unsigned jitter_us) {
        CheckpointOptions o;
        o.threads = threads;
        o.direct = !direct ? CheckpointOptions::Direct::automatic
                           : *direct ? CheckpointOptions::Direct::yes : CheckpointOptions::Direct::no;
        if (chunk_bytes) o.chunk_bytes = *chunk_bytes;
        std::vector<std::byte*> into;
        for (std::uintptr_t a : addresses) into.push_back(reinterpret_cast<std::byte*>(a));
        ring::FileReadReport report;
        {
          py::gil_scoped_release release;
          report = weights::read_checkpoint(planned.path, planned.header, into, o, executors(device, jitter_us));
        }
        return report_dict(report);
      },
      py::arg("planned"), py::arg("addresses"), py::arg("device"), py::arg("threads") = CheckpointOptions{}.threads,
      py::arg("direct") = py::none(), py::arg("chunk_bytes") = py::none(), py::arg("jitter_us") = 0);
  m.def(
      "_read_file_ranges",
      [](const std::string& path, const std::vector<RangeTuple>& ranges, int device, std::size_t chunk_bytes, std::size_t staging, unsigned threads, bool direct, unsigned jitter_us,
         const std::optional<std::string>& staging_wait) {
        const auto spans = file_ranges(ranges);
        const ring::StagingWait wait = staging_wait ? staging_wait_named(*staging_wait) : ring::file_read_staging_wait;
        ring::FileReadReport report;
        {
          py::gil_scoped_release release;
          report = ring::read_file_ranges(path, spans, executors(device, jitter_us, wait),
                                          read_options(chunk_bytes, staging, threads, direct));
        }
        return report_dict(report);
      },
      py::arg("path"), py::arg("ranges"), py::arg("device"), py::arg("chunk_bytes") = ring::FileReadOptions{}.chunk_bytes, py::arg("staging") = ring::FileReadOptions{}.staging,
      py::arg("threads") = 0, py::arg("direct") = false, py::arg("jitter_us") = 0, py::arg("staging_wait") = py::none());
  m.def("_cached_fraction",
        [](const std::string& path, std::uint64_t offset, std::uint64_t bytes) { return ring::cached_fraction(path, offset, bytes); },
        py::arg("path"), py::arg("offset"), py::arg("bytes"));
  // The storage's side of the bound: the same reads on as many lanes, with
  // no copy after them, each into a page-locked chunk of its own (into="lane")
  // or each chunk into its own place of a page-locked span as large as the
  // file's (into="place"). Returns (bytes, seconds, whether O_DIRECT was taken).
  m.def(
      "_read_file_rate",
      [](const std::string& path, std::uint64_t offset, std::size_t bytes, std::size_t chunk_bytes, unsigned threads,
         bool direct, const std::string& into) {
        if (into != "lane" && into != "place") throw std::invalid_argument("into: 'lane' or 'place', not '" + into + "'");
        const auto place = into == "place" ? ring::ReadInto::chunk_place : ring::ReadInto::lane_chunk;
        py::gil_scoped_release release;
        const auto options = read_options(chunk_bytes, 1, threads, direct);
        // A chunk a lane, as the load reads them; or a place for every chunk, from the page under offset.
        const std::size_t places = place == ring::ReadInto::chunk_place
                                       ? (offset % 4096 + bytes + chunk_bytes - 1) / chunk_bytes
                                       : ring::file_read_lanes(options, SIZE_MAX);
        PinnedBuffer<std::byte> buffer(chunk_bytes * std::max<std::size_t>(places, 1));
        const ring::FileRange range{offset, bytes, buffer.data()};
        const auto start = std::chrono::steady_clock::now();
        const ring::FileReadReport read =
            ring::read_file_ranges_to_host(path, {&range, 1}, {buffer.data(), buffer.size()}, options, place);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return std::make_tuple(read.bytes, seconds, read.direct);
      },
      py::arg("path"), py::arg("offset"), py::arg("bytes"), py::arg("chunk_bytes") = ring::FileReadOptions{}.chunk_bytes,
      py::arg("threads") = 0, py::arg("direct") = false, py::arg("into") = "lane");
}

}  // namespace sluice::python
