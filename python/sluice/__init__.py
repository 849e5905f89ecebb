"""sluice: host data through GPU work at the speed of the slowest engine.

    import numpy as np, sluice, torch

    a = np.random.rand(50_000_000).astype(np.float32)       # pageable is fine: sluice stages it
    out = np.empty_like(a)
    p = sluice.Pipeline(kernel_order="independent")          # each chunk's compute stands alone
    x, y = p.input(a), p.output(out)
    p.compute(lambda chunk: torch.mul(chunk[x], 2, out=chunk[y]))   # runs on chunk's stream
    report = p.run()                                          # report.wall_ms, report.bound, report.efficiency

    for inputs, targets in sluice.TokenLoader(["train_*.bin"], batch=16, seq=1024, shuffle=True):
        loss = model(inputs, targets)                          # ready on torch's current stream

Arrays are NumPy arrays or CPU torch tensors (pinned or pageable), C-contiguous
along their first axis: that axis is the items, the rest of a row is one item.
The compute callable gets each chunk's device memory as torch tensors
(chunk[handle]; chunk.cupy(handle) for CuPy) and runs inside
`torch.cuda.stream(chunk.torch_stream)`, so torch work lands on the chunk's
stream. The GIL is held only while the callable runs.
"""
from __future__ import annotations

import weakref

from . import _sluice
from ._sluice import CudaError, IoError, RunReport, ShardError, device_count, unavailable_reason

__all__ = ["Pipeline", "Handle", "Chunk", "TokenLoader", "RunReport", "CudaError", "IoError", "ShardError",
           "device_count", "unavailable_reason", "write_svg", "write_chrome_trace"]


def _torch():
    try:
        import torch
        return torch
    except ImportError:  # NumPy-only users still get the pipeline; tensors need torch
        return None


class Handle:
    """A span added to a pipeline: which one, its item type and item shape."""

    def __init__(self, index, dtype, item_shape, role):
        self.index, self.dtype, self.item_shape, self.role = index, dtype, tuple(item_shape), role

    def __repr__(self):
        return f"Handle({self.index}, {self.role}, {self.dtype}, item shape {self.item_shape})"


def _as_host_array(array, writable):
    """(numpy view, the object that keeps the memory alive) for a host array, or a clear error."""
    import numpy as np
    torch = _torch()
    owner = array
    if torch is not None and isinstance(array, torch.Tensor):
        if array.is_cuda:
            raise TypeError("a CUDA tensor where host memory belongs: pass a CPU tensor (pinned or not) or a NumPy array")
        if not array.is_contiguous():
            raise ValueError("the tensor is not contiguous: call .contiguous() first")
        array = array.numpy()
    elif hasattr(array, "__cuda_array_interface__"):
        raise TypeError("device memory where host memory belongs: pass a NumPy array or a CPU tensor")
    if not isinstance(array, np.ndarray):
        array = np.asarray(array)
    if not array.flags["C_CONTIGUOUS"]:
        raise ValueError("the array is not C-contiguous: np.ascontiguousarray() it first")
    if array.ndim == 0:
        raise ValueError("a 0-d array has no items")
    if writable and not array.flags["WRITEABLE"]:
        raise ValueError("the output array is read-only")
    return array, owner


class Chunk:
    """One chunk as the compute callable sees it."""

    def __init__(self, pipeline, info):
        self._pipeline, self._info = pipeline, info
        self.index, self.count = info.index, info.count
        self.begin, self.end = info.begin, info.end
        self.size = info.end - info.begin
        self.stream = info.stream  # the CUDA stream handle to launch on

    @property
    def torch_stream(self):
        return self._pipeline._torch_stream(self.stream)

    def __cuda_stream__(self):
        """The CUDA stream protocol, version 0: CuPy's Stream.from_external(chunk) and cuda.core take the chunk."""
        return (0, self.stream)

    def _capsule(self, handle):
        if not isinstance(handle, Handle) or handle.index >= len(self._info.slots) or \
                self._pipeline._handles[handle.index] is not handle:
            raise ValueError(f"{handle!r} is not a span of this pipeline")
        shape = [self.size, *handle.item_shape]
        return _sluice.device_view(self._info.slots[handle.index], self._pipeline.device, shape,
                                   handle.dtype.kind + str(handle.dtype.itemsize), self._pipeline._core)

    def __getitem__(self, handle):
        """The chunk's items of a span, in device memory, as a torch tensor (valid inside the callable)."""
        torch = _torch()
        if torch is None:
            raise RuntimeError("chunk[handle] makes torch tensors and torch is not installed; use chunk.cupy(handle)")
        # Slots repeat every `depth` chunks: a view made once per slot and size is reused.
        key = (handle.index, self._info.slots[handle.index], self.size)
        tensor = self._pipeline._views.get(key)
        if tensor is None:
            tensor = self._pipeline._views[key] = torch.utils.dlpack.from_dlpack(self._capsule(handle))
        return tensor

    def cupy(self, handle):
        import cupy
        return cupy.from_dlpack(_Exported(self._capsule(handle), self._pipeline.device))


class _Exported:
    """A capsule with the __dlpack__ protocol, for consumers that want it."""

    def __init__(self, capsule, device):
        self._capsule, self._device = capsule, device

    def __dlpack__(self, stream=None):
        return self._capsule

    def __dlpack_device__(self):
        return (2, self._device)


class Pipeline:
    """Copy in, compute, copy out, chunk by chunk, with every engine busy (see sluice::Pipeline)."""

    def __init__(self, *, chunk_items=0, first_chunk_items=0, ramp=True, depth=4, kernel_order="in_chunk_order",
                 compute_streams=0, staging_threads=0, host_memory="automatic", priority=0, record=False,
                 report_bound=False, device=None):
        # kernel_order: "in_chunk_order" (default) runs the compute of chunk after chunk on one stream, as
        # chunk-to-chunk state needs; "independent" lets neighbouring chunks' compute overlap (two streams).
        if host_memory not in ("stage", "register", "automatic"):
            raise ValueError(f"host_memory must be 'stage', 'register' or 'automatic', not {host_memory!r}")
        if kernel_order not in ("in_chunk_order", "independent"):
            raise ValueError(f"kernel_order must be 'in_chunk_order' or 'independent', not {kernel_order!r}")
        if depth < 1 or compute_streams < 0:
            raise ValueError("depth must be at least 1 and compute_streams at least 0 (0: picked)")
        if kernel_order == "in_chunk_order" and compute_streams > 1:
            raise ValueError(f"compute_streams={compute_streams} would run the compute out of chunk order: "
                             "pass kernel_order='independent' if each chunk's compute stands alone")
        self._options = (chunk_items, first_chunk_items, ramp, depth, kernel_order, compute_streams, staging_threads,
                         host_memory, priority, record, report_bound, device)
        self._pipeline = None  # made at first use: arrays and options are checked without a GPU
        self._handles, self._arrays, self._streams, self._views = [], [], {}, {}

    @property
    def _core(self):
        if self._pipeline is None:
            self._pipeline = _sluice._Pipeline(*self._options)
        return self._pipeline

    @property
    def device(self):
        return self._core.device

    def _add(self, array, role):
        view, owner = _as_host_array(array, writable=role != "input")
        item_bytes = view.itemsize
        for extent in view.shape[1:]:
            item_bytes *= extent
        index = self._core.add_host(view.__array_interface__["data"][0], view.shape[0], item_bytes, role, view)
        handle = Handle(index, view.dtype, view.shape[1:], role)
        self._handles.append(handle)
        self._arrays.append((view, owner))  # the memory stays alive as long as the span
        return handle

    def input(self, array) -> Handle:
        return self._add(array, "input")

    def output(self, array) -> Handle:
        return self._add(array, "output")

    def inout(self, array) -> Handle:
        return self._add(array, "inout")

    def rebind(self, handle, array):
        """Points a span at another array of the same item type and shape."""
        view, owner = _as_host_array(array, writable=handle.role != "input")
        if view.dtype != handle.dtype or view.shape[1:] != handle.item_shape:
            raise ValueError(f"rebind needs items of {handle.dtype} x {handle.item_shape}, not "
                             f"{view.dtype} x {view.shape[1:]}")
        self._core.rebind(handle.index, view.__array_interface__["data"][0], view.shape[0], view)
        self._arrays[handle.index] = (view, owner)
        self._views.clear()

    def _torch_stream(self, handle):
        stream = self._streams.get(handle)
        if stream is None:
            stream = self._streams[handle] = _torch().cuda.ExternalStream(handle, device=self.device)
        return stream

    def compute(self, fn):
        """fn(chunk) enqueues the chunk's work on chunk.stream (torch ops: done for you)."""
        torch = _torch()
        me = weakref.proxy(self)  # the C++ side holds `call`: a strong reference would keep self alive for ever

        def call(info):
            chunk = Chunk(me, info)
            try:
                if torch is not None:
                    with torch.cuda.stream(chunk.torch_stream):
                        fn(chunk)
                else:
                    fn(chunk)
            except BaseException as e:
                if hasattr(e, "add_note"):
                    e.add_note(f"raised by the compute callable in sluice chunk {info.index} of {info.count} "
                               f"(items {info.begin}..{info.end})")
                raise

        self._core.compute(call)
        return self

    def on_chunk_done(self, fn):
        """fn(index, begin, end) once a chunk's outputs are in host memory, in order."""
        self._core.on_chunk_done(fn)
        return self

    def clear_spans(self):
        self._core.clear_spans()
        self._handles, self._arrays, self._views = [], [], {}
        return self

    def run(self, stream=None) -> RunReport:
        """Runs to the end. `stream` (a torch stream or a raw handle): order the run after its work, its later work after the run."""
        if stream is not None and not isinstance(stream, int):
            stream = stream.cuda_stream
        return self._core.run(stream)


class TokenLoader:
    """Training batches from llm.c token shards, on the GPU before the step asks (see sluice::TokenLoader).

    Iterating yields (inputs, targets): int32 CUDA tensors of batch x seq, ready on
    torch's current stream (the stream waits on the batch; the host does not).
    A batch's memory is reused once the next batch is taken: clone what you keep.
    One pass of `for` is one epoch; the next `for` goes on with the next epoch.
    """

    def __init__(self, files, *, batch, seq, shuffle=False, seed=0, rank=0, world=1, drop_last=False, ahead=3,
                 threads=0, device=None, state=None):
        if isinstance(files, str):
            files = [files]
        self._args = dict(files=list(files), seq=seq, batch=batch, shuffle=shuffle, seed=seed, rank=rank, world=world,
                          drop_last=drop_last, ahead=ahead, threads=threads, device=device)
        epoch, start = (state["epoch"], state["batch"]) if state else (0, 0)
        self._core = _sluice._TokenLoader(epoch=epoch, start_batch=start, **self._args)

    def __len__(self):
        return self._core.batches_per_epoch

    def __iter__(self):
        torch = _torch()
        if torch is None:
            raise RuntimeError("TokenLoader yields torch tensors and torch is not installed")
        while True:
            stream = torch.cuda.current_stream(self._args["device"]).cuda_stream
            x, y, epoch, index, last = self._core.next(stream)
            yield torch.utils.dlpack.from_dlpack(x), torch.utils.dlpack.from_dlpack(y)
            if last:
                return

    def state_dict(self):
        epoch, index = self._core.state()
        return {"epoch": epoch, "batch": index, "seed": self._args["seed"], "shuffle": self._args["shuffle"]}

    def load_state_dict(self, state):
        """Resumes at `state`: the batches that follow are the ones the saving run would have seen next."""
        if state.get("seed", self._args["seed"]) != self._args["seed"] or \
                state.get("shuffle", self._args["shuffle"]) != self._args["shuffle"]:
            raise ValueError("the state was saved with another seed or shuffle setting")
        self._core = None  # stop this loader's readers first
        self._core = _sluice._TokenLoader(epoch=state["epoch"], start_batch=state["batch"], **self._args)

    def idle(self):
        """How long the consumer's stream waited for data: steps, fill_ms, waited_ms, loop_ms, idle_fraction."""
        return self._core.idle()


def write_svg(path, reports, titles=()):
    """A timeline picture of recorded runs (Pipeline(record=True)), one lane per engine."""
    _sluice.write_timeline(str(path), list(reports), list(titles), "svg")


def write_chrome_trace(path, reports, titles=()):
    """The recorded runs as Chrome trace JSON (opens in Perfetto and chrome://tracing)."""
    _sluice.write_timeline(str(path), list(reports), list(titles), "chrome")
