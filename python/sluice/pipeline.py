"""Pipeline: host arrays through GPU work chunk by chunk (see sluice::Pipeline)."""
from __future__ import annotations

import weakref

from . import _sluice
from ._arrays import as_host_array, torch_or_none
from ._sluice import RunReport

class Handle:
    """A span added to a pipeline: which one, its item type and item shape."""

    def __init__(self, index, dtype, item_shape, role):
        self.index, self.dtype, self.item_shape, self.role = index, dtype, tuple(item_shape), role

    def __repr__(self):
        return f"Handle({self.index}, {self.role}, {self.dtype}, item shape {self.item_shape})"


class Chunk:
    """One chunk as the compute callable sees it."""

    def __init__(self, owner, info, device):
        self._owner, self._info = owner, info
        self.index, self.count = info.index, info.count
        self.begin, self.end = info.begin, info.end
        self.size = info.end - info.begin
        self.stream = info.stream  # the CUDA stream handle to launch on
        self.device = device

    @property
    def torch_stream(self):
        return self._owner._torch_stream(self.stream, self.device)

    def __cuda_stream__(self):
        """The CUDA stream protocol, version 0: CuPy's Stream.from_external(chunk) and cuda.core take the chunk."""
        return (0, self.stream)

    def _check(self, handle):
        if not isinstance(handle, Handle):
            raise TypeError(f"a chunk is indexed by a span handle (what input(), output() or inout() returned), "
                            f"not {type(handle).__name__}")
        handles = self._owner._handles
        if handle.index >= len(handles) or handles[handle.index] is not handle:
            raise ValueError(f"{handle!r} is not a span of this pipeline: it belongs to another one, "
                             f"or to spans cleared since it was made")

    def _capsule(self, handle):
        shape = [self.size, *handle.item_shape]
        return _sluice.device_view(self._info.slots[handle.index], self.device, shape,
                                   handle.dtype.kind + str(handle.dtype.itemsize), self._owner._core)

    def __getitem__(self, handle):
        """The chunk's items of a span, in device memory, as a torch tensor (valid inside the callable)."""
        self._check(handle)  # before the cache: a foreign handle must never find this pipeline's view
        torch = torch_or_none()
        if torch is None:
            raise RuntimeError("chunk[handle] makes torch tensors and torch is not installed; use chunk.cupy(handle)")
        # Slots repeat every `depth` chunks: a view made once per slot and size is reused.
        key = (handle.index, self._info.slots[handle.index], self.size)
        tensor = self._owner._views.get(key)
        if tensor is None:
            tensor = self._owner._views[key] = torch.utils.dlpack.from_dlpack(self._capsule(handle))
        return tensor

    def cupy(self, handle):
        self._check(handle)
        import cupy
        return cupy.from_dlpack(_Exported(self._capsule(handle), self.device))


class _Exported:
    """A capsule with the __dlpack__ protocol, for consumers that want it."""

    def __init__(self, capsule, device):
        self._capsule, self._device = capsule, device

    def __dlpack__(self, stream=None):
        return self._capsule

    def __dlpack_device__(self):
        return (2, self._device)


class _Spans:
    """What Pipeline and MultiPipeline share: spans from arrays, the arrays kept alive, chunks for the callable.

    The arrays given as spans are held for as long as the pipeline may touch them: until
    clear_spans(), a rebind() of that span, or the pipeline's end.
    """

    def __init__(self, cpp):
        self._cpp = cpp  # the C++ pipeline (None until made, for Pipeline)
        self._handles, self._arrays, self._streams, self._views = [], [], {}, {}

    def __del__(self):
        # The C++ pipeline goes first (with the views that hold it): it may hold
        # the arrays registered, and they must outlive that.
        self._views = {}
        self._cpp = None

    def _add(self, array, role):
        view, owner = as_host_array(array, writable=role != "input")
        item_bytes = view.itemsize
        for extent in view.shape[1:]:
            item_bytes *= extent
        # The C++ span holds (view, owner) too: the memory outlives any page-locking of it.
        index = self._core.add_host(view.__array_interface__["data"][0], view.shape[0], item_bytes, role, (view, owner))
        handle = Handle(index, view.dtype, view.shape[1:], role)
        self._handles.append(handle)
        self._arrays.append((view, owner))  # the memory stays alive as long as the span
        return handle

    def input(self, array) -> Handle:
        return self._add(array, "input")

    def output(self, array) -> Handle:
        """An array the results are written into: a NumPy array or CPU tensor (a list is refused)."""
        return self._add(array, "output")

    def inout(self, array) -> Handle:
        return self._add(array, "inout")

    def _torch_stream(self, handle, device):
        stream = self._streams.get(handle)
        if stream is None:
            stream = self._streams[handle] = torch_or_none().cuda.ExternalStream(handle, device=device)
        return stream

    def _call_in_chunk(self, fn, chunk, *args):
        torch = torch_or_none()
        try:
            if torch is not None:
                with torch.cuda.device(chunk.device), torch.cuda.stream(chunk.torch_stream):
                    fn(chunk, *args)
            else:
                fn(chunk, *args)
        except BaseException as e:
            if hasattr(e, "add_note"):
                e.add_note(f"raised by the compute callable in sluice chunk {chunk.index} of {chunk.count} "
                           f"(items {chunk.begin}..{chunk.end})")
            raise


class Pipeline(_Spans):
    """Copy in, compute, copy out, chunk by chunk, with every engine busy (see sluice::Pipeline)."""

    def __init__(self, *, chunk_items=0, first_chunk_items=0, ramp=True, adapt_chunks=True, depth=4,
                 kernel_order="in_chunk_order", compute_streams=0, staging_threads=0, host_memory="automatic",
                 priority=0, record=False, report_bound=False, device=None):
        # kernel_order: "in_chunk_order" (default) runs the compute of chunk after chunk on one stream, as
        # chunk-to-chunk state needs; "independent" lets neighbouring chunks' compute overlap (two streams).
        # adapt_chunks: with chunk_items 0, the first run times its stages, and where the kernels took longer
        # than the copies, later runs start and end with 512 KiB chunks (with independent kernels on two
        # streams or more and 16 MiB of data or less, every chunk is 512 KiB; its notes say which).
        self._options = dict(chunk_items=chunk_items, first_chunk_items=first_chunk_items, ramp=ramp,
                             adapt_chunks=adapt_chunks, depth=depth,
                             kernel_order=kernel_order, compute_streams=compute_streams,
                             staging_threads=staging_threads, host_memory=host_memory, priority=priority,
                             record=record, report_bound=report_bound, device=device)
        # The C++ pipeline checks the options before it touches the GPU. With no GPU it is made at first
        # use instead, so that arrays are still checked (and the error then says there is no GPU).
        try:
            cpp = _sluice._Pipeline(**self._options)
        except _sluice.CudaError:
            cpp = None
        super().__init__(cpp)

    @property
    def _core(self):
        if self._cpp is None:
            self._cpp = _sluice._Pipeline(**self._options)
        return self._cpp

    @property
    def device(self):
        return self._core.device

    def rebind(self, handle, array):
        """Points a span at another array of the same item type and shape."""
        view, owner = as_host_array(array, writable=handle.role != "input")
        if view.dtype != handle.dtype or view.shape[1:] != handle.item_shape:
            raise ValueError(f"rebind needs items of {handle.dtype} x {handle.item_shape}, not "
                             f"{view.dtype} x {view.shape[1:]}")
        self._core.rebind(handle.index, view.__array_interface__["data"][0], view.shape[0], (view, owner))
        self._arrays[handle.index] = (view, owner)
        self._views.clear()

    def compute(self, fn, replay=False):
        """fn(chunk) enqueues the chunk's work on chunk.stream (torch ops: done for you).

        replay=True: the first run is captured as a CUDA graph and every run replays it,
        so fn is called once per chunk AT CAPTURE ONLY (the first run, and the first after
        rebind() or clear_spans(); and the second run where the first learnt its chunks
        (adapt_chunks), captured again without timing marks), not on every run: it must launch the same work each
        time, with no allocations (torch ops with out=). Arrays must be page-locked or
        owned by the pipeline (they are: it page-locks them); see sluice::Replay.
        """
        me = weakref.proxy(self)  # the C++ side holds `call`: a strong reference would keep self alive for ever
        device = self.device
        self._core.compute(lambda info: me._call_in_chunk(fn, Chunk(me, info, device)), replay)
        return self

    def on_chunk_done(self, fn):
        """fn(index, begin, end) once a chunk's outputs are in host memory, in order."""
        self._core.on_chunk_done(fn)
        return self

    def clear_spans(self):
        """Forgets the spans (their handles stop working) and lets go of their arrays."""
        self._core.clear_spans()
        self._handles, self._arrays, self._views = [], [], {}
        return self

    def run(self, stream=None) -> RunReport:
        """Runs to the end. `stream` (a torch stream or a raw handle): order the run after its work, its later work after the run."""
        if stream is not None and not isinstance(stream, int):
            stream = stream.cuda_stream
        return self._core.run(stream)
