"""Checkpoints onto the GPU at the link's bound: load_file reads a safetensors file's tensors as
sluice::load_checkpoint does (the same reading, weights/checkpoint_read.hpp), each into a torch
tensor of its own."""
from __future__ import annotations

import os
import time

from . import _sluice
from ._arrays import torch_or_none
from ._devices import cuda_index

# The format's dtype names and torch's (safetensors.torch uses the same pairs). F4 and F6 pack
# elements below a byte, which no torch dtype here holds one to an element.
_TORCH_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "F16": "float16",
    "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64",
    "F64": "float64", "I64": "int64", "U64": "uint64", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
    "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
}


def load_file(path, device="cuda", *, direct="auto", threads=0, chunk_mib=None, _host_executor=None, _report=None):
    """The tensors of a safetensors file, on a CUDA device, as {name: tensor} in file order.

        state = sluice.load_file("model.safetensors")            # torch's current CUDA device
        model.load_state_dict(state)

    The same tensors as safetensors.torch.load_file(path, device="cuda") - dtypes, shapes and
    bytes as stored, each tensor in memory of its own, in the order the file holds them - at the
    link's speed: the file is cut into chunks of `chunk_mib` (None: the reader's own, 4, the fastest
    of 2-16 MiB measured, as CheckpointOptions in C++), and each of `threads` lanes (0: 12, or
    all cores but two where fewer) takes the next chunk no lane has taken and preads it into one of
    two page-locked slots that are reused while a copy stream of its own carries the one before to
    the tensors; the host copies the file once (the page cache into the slots). A lane polls for
    its slot's copy rather than sleeping, so the lanes keep their cores busy while the load runs
    (by default all cores but two at the most). With direct=True the reads skip the page cache
    (O_DIRECT) where the file system allows it: faster for a file that is not cached and will not
    be read again, slower for one that is.

    The header is read and checked before any GPU memory is taken: a truncated file, offsets that
    overlap, leave a hole or run past the end, an unknown dtype or a header over 100 MB is a
    ValueError naming the file and the tensor. A read that fails is a sluice.IoError naming the
    file, the offset and how far the load got; so is a file renamed over `path` or written between
    the header's read and the tensors' (a concurrent save, a checkpoint rotated by another job). Returns once every byte is on the device; torch's
    current stream may use the tensors at once.

    `_report`, a dict, gets where the time went: "setup_seconds" (header and tensors; of which
    "header_seconds", the header read and checked and the device chosen, and "tensors_seconds"),
    "read_seconds" (the page-cache check for direct="auto", and the reads) and the read's "lanes"
    (each lane's chunks, bytes and seconds reading and putting, and from the read's start until its
    ring was made, its first read began and its last copy was done), for benches.
    """
    started = time.perf_counter()
    torch = torch_or_none()
    if torch is None:
        raise RuntimeError("load_file makes torch tensors and torch is not installed")
    if chunk_mib is not None and chunk_mib < 1:
        raise ValueError("chunk_mib must be at least 1")
    if direct not in ("auto", True, False):
        raise ValueError(f"direct must be True, False or 'auto', not {direct!r}")
    path = os.fspath(path)
    planned = _sluice._plan_checkpoint(path)  # read and checked before any memory is taken
    header = planned.header
    dtypes = {}
    for name, dtype, _, _, _ in header["tensors"]:
        torch_name = _TORCH_DTYPES.get(dtype)
        dtypes[name] = getattr(torch, torch_name, None) if torch_name else None
        if dtypes[name] is None:
            raise ValueError(f"{path}: tensor '{name}' is {dtype}, which this torch ({torch.__version__}) has no dtype for")
    if _host_executor is not None:
        index, target = -1, torch.device("cpu")
    else:
        target = torch.device(device if not isinstance(device, int) else ("cuda", device))
        if target.type != "cuda":
            raise ValueError(f"load_file reads onto a CUDA device, not '{target}' (safetensors.torch.load_file reads into host memory)")
        index = cuda_index(torch, target)
        target = torch.device("cuda", index)
    header_read = time.perf_counter()
    tensors = {}
    for name, _, shape, _, _ in header["tensors"]:  # in file order: the reads go front to back
        tensors[name] = torch.empty(shape, dtype=dtypes[name], device=target)
    tensors_made = time.perf_counter()
    if index >= 0:
        # The caching allocator hands out memory that work still queued on the current stream
        # may have used before it was freed; the copy streams write it only after that work.
        # The host waits for every copy before returning: any stream may use the tensors then.
        torch.cuda.current_stream(index).synchronize()
    options = _host_executor or {}
    read_from = time.perf_counter()
    # load_checkpoint's own reading, into these tensors. The reads open the file by path again:
    # they refuse (sluice.IoError) a file renamed over it or written since its header was read,
    # whose bytes would not be where the header says.
    read = _sluice._read_checkpoint(planned, [t.data_ptr() for t in tensors.values()], index, threads=threads,
                                    direct=None if direct == "auto" else bool(direct),
                                    chunk_bytes=None if chunk_mib is None else int(chunk_mib) << 20,
                                    jitter_us=options.get("jitter_us", 0))
    if _report is not None:
        _report.update(read, setup_seconds=read_from - started, read_seconds=time.perf_counter() - read_from,
                       header_seconds=header_read - started, tensors_seconds=tensors_made - header_read)
    return tensors


def read_header(path):
    """A safetensors file's header, checked as load_file checks it: {"tensors": [(name, dtype,
    shape, begin, end)], "metadata": {..}, "data_begin": .., "file_bytes": .., "file": (device,
    inode, size, mtime_ns)}, offsets absolute; "file" says which file was read."""
    return _sluice._plan_checkpoint(os.fspath(path)).header
