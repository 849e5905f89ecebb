#pragma once
// What the parts of the module share.
#include <pybind11/pybind11.h>

#include <memory>

namespace sluice::python {

// A Python object that may be released from any thread: it takes the GIL to go.
std::shared_ptr<pybind11::object> hold_with_gil(pybind11::object o);

// TokenLoader and BatchPlan (loaders.cpp).
void bind_loaders(pybind11::module_& m);
// The prefetcher for batches of any shape (prefetch.cpp).
void bind_prefetcher(pybind11::module_& m);
// Safetensors headers and file reads into device memory (checkpoint.cpp).
void bind_checkpoint(pybind11::module_& m);
// The durable file sink, for checkpoints saved from the GPU (file_sink.cpp).
void bind_file_sink(pybind11::module_& m);
// Device memory copied into the caller's page-locked memory on a ring to the host (copies_to_host.cpp).
void bind_copies_to_host(pybind11::module_& m);

}  // namespace sluice::python
