"""Host arrays as the pipelines take them, with clear errors for arrays they cannot."""
from __future__ import annotations


def torch_or_none():
    try:
        import torch
        return torch
    except ImportError:  # NumPy-only users still get the pipelines; tensors need torch
        return None


def as_host_array(array, writable):
    """(numpy view, the object that keeps the memory alive, item type) for a host array, or a clear error.

    An output (writable) must be memory the results can be written into: a NumPy array, a CPU
    tensor or an object with the buffer protocol. A list is refused there, since np.asarray would
    copy it and the results would go to the copy. An input may be anything np.asarray takes (a
    copy is made and kept for as long as the span).

    The item type is the array's own: a NumPy dtype, or the torch dtype of a tensor whose type
    NumPy lacks (bfloat16, the float8 types), whose view is then an integer array of the same
    size: the bytes travel as they are and chunk[handle] types them again on the device.
    """
    import numpy as np
    torch = torch_or_none()
    owner = array
    dtype = None
    if torch is not None and isinstance(array, torch.Tensor):
        if array.is_cuda:
            raise TypeError("a CUDA tensor where host memory belongs: pass a CPU tensor (pinned or not) or a NumPy array")
        if not array.is_contiguous():
            raise ValueError("the tensor is not contiguous: call .contiguous() first")
        array, dtype = _tensor_as_numpy(torch, array)
    elif hasattr(array, "__cuda_array_interface__"):
        raise TypeError("device memory where host memory belongs: pass a NumPy array or a CPU tensor")
    if not isinstance(array, np.ndarray):
        if writable and not _shares_its_memory(array):
            raise TypeError(f"an output must be memory the results can be written into (a NumPy array, a CPU tensor, "
                            f"a writable buffer), not a {type(array).__name__}: the results would go to a copy")
        array = np.asarray(array)
    if not array.dtype.isnative:
        raise TypeError(f"the array's bytes are in non-native byte order ({array.dtype.str!r}); the GPU reads them as "
                        f"they are, so each value would be wrong: pass array.astype(array.dtype.newbyteorder('='))")
    if not array.flags["C_CONTIGUOUS"]:
        raise ValueError("the array is not C-contiguous: np.ascontiguousarray() it first")
    if array.ndim == 0:
        raise ValueError("a 0-d array has no items")
    if writable and not array.flags["WRITEABLE"]:
        raise ValueError("the output array is read-only")
    return array, owner, array.dtype if dtype is None else dtype


def _tensor_as_numpy(torch, tensor):
    """(numpy view, None) of a CPU tensor, or (integer view of the same size, its torch dtype) where NumPy has no such type."""
    try:
        return tensor.numpy(), None
    except TypeError:  # "Got unsupported ScalarType ...": a type NumPy lacks
        pass
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(tensor.element_size())
    if as_int is None:
        raise TypeError(f"a tensor of {tensor.dtype} has no host array type sluice can carry: pass it as "
                        f"tensor.view(<an integer type of {tensor.element_size()} bytes>) and view it back on the device")
    return tensor.view(as_int).numpy(), tensor.dtype


def _shares_its_memory(obj):
    """Whether np.asarray(obj) views obj's own memory rather than copying it."""
    if hasattr(obj, "__array_interface__"):
        return True
    try:
        memoryview(obj).release()
        return True
    except TypeError:
        return False
