#include "dlpack.hpp"

#include <stdexcept>

namespace sluice::python {

namespace py = pybind11;

namespace {

// What a DLManagedTensor carries with it: its shape, and a reference to the
// Python object that keeps the memory's owner alive.
struct Context {
  std::vector<std::int64_t> shape;
  PyObject* owner;
};

void release(DLManagedTensor* tensor) {
  auto* context = static_cast<Context*>(tensor->manager_ctx);
  {
    // The consumer may drop the tensor on any thread, with or without the GIL.
    py::gil_scoped_acquire gil;
    Py_XDECREF(context->owner);
  }
  delete context;
  delete tensor;
}

// A capsule nobody consumed frees its tensor; a consumed one was renamed
// "used_dltensor" and its consumer calls the deleter.
void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* tensor = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (tensor && tensor->deleter) tensor->deleter(tensor);
  }
}

}  // namespace

DLDataType dl_type(const std::string& kind) {
  if (kind.size() < 2) throw std::invalid_argument("unknown array type '" + kind + "'");
  const int bytes = std::stoi(kind.substr(1));
  const auto bits = static_cast<std::uint8_t>(8 * bytes);
  switch (kind[0]) {
    case 'f': return {2, bits, 1};
    case 'i': return {0, bits, 1};
    case 'u': return {1, bits, 1};
    case 'b': return {6, 8, 1};
    case 'c': return {5, bits, 1};
    default: throw std::invalid_argument("arrays of type '" + kind + "' have no DLPack type (use ints, uints, floats, complex or bools)");
  }
}

py::capsule device_capsule(void* data, int device, const std::vector<std::int64_t>& shape, DLDataType type, py::object owner) {
  auto* context = new Context{shape, owner.release().ptr()};
  auto* tensor = new DLManagedTensor{};
  tensor->dl_tensor.data = data;
  tensor->dl_tensor.device = device < 0 ? DLDevice{1, 0} : DLDevice{2, device};
  tensor->dl_tensor.ndim = static_cast<std::int32_t>(context->shape.size());
  tensor->dl_tensor.dtype = type;
  tensor->dl_tensor.shape = context->shape.data();
  tensor->dl_tensor.strides = nullptr;
  tensor->dl_tensor.byte_offset = 0;
  tensor->manager_ctx = context;
  tensor->deleter = release;
  PyObject* capsule = PyCapsule_New(tensor, "dltensor", capsule_destructor);
  if (!capsule) {
    release(tensor);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

}  // namespace sluice::python
