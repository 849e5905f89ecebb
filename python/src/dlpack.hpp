#pragma once
// DLPack (the array-exchange ABI of torch, CuPy, JAX, NumPy), declared here
// to hand device memory to Python frameworks without copying it. The layout
// is DLPack's stable v0.x ABI; a capsule named "dltensor" is what
// torch.utils.dlpack.from_dlpack and cupy.from_dlpack take.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::python {

struct DLDevice {
  std::int32_t device_type;  // 1: CPU, 2: CUDA
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;  // 0: int, 1: uint, 2: float, 4: bfloat, 6: bool
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // null: compact row-major
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

// A NumPy-style type string ("f4", "u2", "i8", "b1", ...) as DLPack's type.
DLDataType dl_type(const std::string& numpy_kind_and_size);

// A capsule viewing `data` on CUDA device `device` (host memory where it is -1) as an array of `shape`
// and `type`. `owner` is kept alive as long as the capsule's consumer keeps
// the tensor: the memory itself belongs to whoever owns it.
pybind11::capsule device_capsule(void* data, int device, const std::vector<std::int64_t>& shape, DLDataType type,
                                 pybind11::object owner);

}  // namespace sluice::python
