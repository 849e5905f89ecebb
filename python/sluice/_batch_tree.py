"""A batch as its structure and its host arrays: flatten() on the producer's thread, rebuild() in the
training loop. Tuples, named tuples, lists, dicts and dataclasses nest; tensors and NumPy arrays are
the leaves that travel; anything else (ints, strings, None, CUDA tensors) passes through as it is."""
from __future__ import annotations

import copy
import dataclasses

from ._shared_memory import NONE, SharedFiles
from .pinned_collate import SlotBatch


class Leaf:
    """A host array of the batch: where it lies (an index into the leaves) and what it is on arrival."""
    __slots__ = ("index", "dtype", "shape", "bytes")

    def __init__(self, index, dtype, shape, bytes_):
        self.index, self.dtype, self.shape, self.bytes = index, dtype, shape, bytes_


class Flat:
    """A flattened batch: its spec, and per leaf (address, bytes, page-locked, the file that also holds it or -1,
    the offset there) and the host tensor that holds it."""
    __slots__ = ("spec", "pieces", "tensors", "page_locked")

    def __init__(self):
        self.spec, self.pieces, self.tensors, self.page_locked = None, [], [], False


def _host_tensor(torch, value):
    """A contiguous CPU tensor over the leaf's memory (no copy where it already is one)."""
    if isinstance(value, torch.Tensor):
        return value.contiguous()
    import numpy as np
    array = np.ascontiguousarray(value)
    try:
        return torch.from_numpy(array)
    except TypeError as e:
        raise TypeError(f"a NumPy array of dtype {array.dtype} cannot become a tensor: {e}") from None


def _is_array(torch, value):
    if isinstance(value, torch.Tensor):
        return not value.is_cuda
    return type(value).__module__ == "numpy" and type(value).__name__ == "ndarray"


def flatten(torch, batch):
    flat = Flat()
    flat.spec = _walk(torch, SharedFiles(), flat, batch)
    return flat


# A module function, not a closure inside flatten(): a closure that calls itself is a reference
# cycle, which kept each batch's host arrays (a DataLoader's shared memory) alive until Python's
# cycle collector ran, and then freed dozens of them in one pause (150-250 ms on an H100 machine).
def _walk(torch, shared, flat, value):
    if isinstance(value, SlotBatch):  # a worker's batch in page-locked memory: its tensors lie there
        value = value.tensors()
    if _is_array(torch, value):
        tensor = _host_tensor(torch, value)
        flat.tensors.append(tensor)
        pinned = bool(tensor.is_pinned()) if tensor.numel() > 0 else False
        flat.page_locked |= pinned
        bytes_ = tensor.numel() * tensor.element_size()
        fd, fd_offset = NONE if pinned else shared.of(tensor)
        flat.pieces.append((tensor.data_ptr(), bytes_, pinned, fd, fd_offset))
        return Leaf(len(flat.pieces) - 1, tensor.dtype, tuple(tensor.shape), bytes_)

    def walk(v):
        return _walk(torch, shared, flat, v)

    if isinstance(value, dict):
        return ("dict", type(value), [(k, walk(v)) for k, v in value.items()])
    if isinstance(value, tuple):
        items = [walk(v) for v in value]
        return ("named", type(value), items) if hasattr(value, "_fields") else ("tuple", type(value), items)
    if isinstance(value, list):
        return ("list", type(value), [walk(v) for v in value])
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ("dataclass", value, [(f.name, walk(getattr(value, f.name))) for f in dataclasses.fields(value)])
    return ("value", value)


def rebuild(spec, block, offsets):
    """The batch on the device: each leaf a view of the batch's block at its offset."""
    if isinstance(spec, Leaf):
        offset = offsets[spec.index]
        return block[offset:offset + spec.bytes].view(spec.dtype).view(spec.shape)
    kind = spec[0]
    if kind == "value":
        return spec[1]
    if kind == "dict":
        out = spec[1]() if spec[1] is not dict else {}
        for key, item in spec[2]:
            out[key] = rebuild(item, block, offsets)
        return out
    if kind == "named":
        return spec[1](*(rebuild(item, block, offsets) for item in spec[2]))
    if kind in ("tuple", "list"):
        items = [rebuild(item, block, offsets) for item in spec[2]]
        return items if spec[1] is list else spec[1](items)
    if kind == "dataclass":
        out = copy.copy(spec[1])
        for name, item in spec[2]:
            object.__setattr__(out, name, rebuild(item, block, offsets))  # frozen dataclasses too
        return out
    raise AssertionError(f"unknown batch spec {kind!r}")

