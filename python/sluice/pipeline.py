"""Pipeline: host arrays through GPU work chunk by chunk (see sluice::Pipeline)."""
from __future__ import annotations

import weakref

from . import _options, _sluice
from ._arrays import as_host_array, torch_or_none
from ._sluice import RunReport

class Handle:
    """A span added to a pipeline: which one, its item type and item shape.

    dtype is a NumPy dtype, or a torch dtype where NumPy has none (torch.bfloat16): chunk[handle]
    is a tensor of that type. generation is the pipeline's spans' generation when it was made:
    the pipeline refuses a handle of another one, or of spans cleared since.
    """

    def __init__(self, index, dtype, item_shape, role, generation=None, wire=None):
        self.index, self.dtype, self.item_shape, self.role = index, dtype, tuple(item_shape), role
        self.generation = generation
        self._wire = dtype if wire is None else wire  # the NumPy type the bytes travel as

    def __repr__(self):
        return f"Handle({self.index}, {self.role}, {self.dtype}, item shape {self.item_shape})"


def _check_handle(handles, handle, use):
    """`handle` is one of `handles` (a pipeline's spans now), or a clear error."""
    if not isinstance(handle, Handle):
        raise TypeError(f"{use} a span handle (what input(), output() or inout() returned), "
                        f"not {type(handle).__name__}")
    if handle.index >= len(handles) or handles[handle.index] is not handle:
        raise ValueError(f"{handle!r} is not a span of this pipeline: it belongs to another one, "
                         f"or to spans cleared since it was made")


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
        _check_handle(self._owner._handles, handle, "a chunk is indexed by")

    def _capsule(self, handle):
        shape = [self.size, *handle.item_shape]
        wire = handle._wire
        return _sluice.device_view(self._info.slots[handle.index], self.device, shape,
                                   wire.kind + str(wire.itemsize), self._owner._core)

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
            tensor = torch.utils.dlpack.from_dlpack(self._capsule(handle))
            if handle.dtype is not handle._wire:  # a type NumPy lacks (bfloat16): the bytes, typed again
                tensor = tensor.view(handle.dtype)
            self._owner._views[key] = tensor
        return tensor

    def cupy(self, handle):
        self._check(handle)
        if handle.dtype is not handle._wire:
            raise TypeError(f"CuPy has no {handle.dtype}: take chunk[handle] (a torch tensor) for this span")
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
        self._runs = 0
        self._capture_pool = None  # (run, torch.cuda.MemPool) of the last capture: see _call_captured
        self._retired_pools = []  # pools of graphs captured over in the run under way

    def __del__(self):
        # The C++ pipeline goes first (with the views that hold it): it may hold
        # the arrays registered, and they must outlive that; its graph may replay
        # into the capture's pool, so the pool goes after it.
        self._views = {}
        self._cpp = None
        self._capture_pool = None

    def _add(self, array, role):
        view, owner, dtype = as_host_array(array, writable=role != "input")
        item_bytes = view.itemsize
        for extent in view.shape[1:]:
            item_bytes *= extent
        # The C++ span holds (view, owner) too: the memory outlives any page-locking of it.
        index = self._core.add_host(view.__array_interface__["data"][0], view.shape[0], item_bytes, role, (view, owner))
        handle = Handle(index, dtype, view.shape[1:], role, getattr(self._core, "generation", None), view.dtype)
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
                    if torch.cuda.is_current_stream_capturing():
                        self._call_captured(torch, fn, chunk, *args)
                    else:
                        fn(chunk, *args)
            else:
                fn(chunk, *args)
        except BaseException as e:
            if hasattr(e, "add_note"):
                e.add_note(f"raised by the compute callable in sluice chunk {chunk.index} of {chunk.count} "
                           f"(items {chunk.begin}..{chunk.end})")
            raise

    def _call_captured(self, torch, fn, chunk, *args):
        """fn while its run is captured as a graph: what torch allocates stays the graph's.

        A replay reuses the addresses the capture saw. Memory torch allocates in the callable
        (an op without out=) would go back to torch's cache once the op is done, and be given
        to other tensors or returned to the driver (empty_cache()) while the graph still
        writes there. So it comes from a pool of its own (torch.cuda.MemPool, as
        torch.cuda.graph keeps a private pool) that lives as long as the graph may replay:
        until the next capture, clear_spans(), a new compute callable or the pipeline's end.
        """
        mem_pool = getattr(torch.cuda, "MemPool", None)
        use_mem_pool = getattr(torch.cuda, "use_mem_pool", None)
        if mem_pool is None or use_mem_pool is None:
            before = _allocations(torch, chunk.device)
            fn(chunk, *args)
            if _allocations(torch, chunk.device) != before:
                raise RuntimeError(
                    f"the compute callable allocated device memory while its run was captured for replay, and this "
                    f"torch ({torch.__version__}) has no torch.cuda.MemPool to keep that memory for the graph: the "
                    f"graph would write into memory torch hands to other tensors. Use torch ops with out= (into "
                    f"chunk[handle] or tensors made before the run), compute(fn, replay=False), or a torch that has "
                    f"torch.cuda.MemPool and torch.cuda.use_mem_pool")
            return
        if self._capture_pool is None or self._capture_pool[0] != self._runs:
            # A new capture: the last graph will not replay again. Its pool goes once this run is
            # over (run() returns with the device done), not while the capture is under way.
            if self._capture_pool is not None:
                self._retired_pools.append(self._capture_pool[1])
            self._capture_pool = (self._runs, mem_pool())
        with use_mem_pool(self._capture_pool[1], chunk.device):
            fn(chunk, *args)


def _allocations(torch, device):
    return torch.cuda.memory_stats(device).get("allocation.all.allocated", 0)


class Pipeline(_Spans):
    """Copy in, compute, copy out, chunk by chunk, with every engine busy (see sluice::Pipeline)."""

    def __init__(self, **options):
        self._options = _options.PIPELINE.given(options)
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
        """Points a span at another array of the same item type and shape (a captured run captures again)."""
        _check_handle(self._handles, handle, "rebind() takes")  # as chunk[handle]: this pipeline's, and of its spans now
        view, owner, dtype = as_host_array(array, writable=handle.role != "input")
        if dtype != handle.dtype or view.shape[1:] != handle.item_shape:
            raise ValueError(f"rebind needs items of {handle.dtype} x {handle.item_shape}, not "
                             f"{dtype} x {view.shape[1:]}")
        self._core.rebind(handle.index, handle.generation, handle.role, view.__array_interface__["data"][0],
                          view.shape[0], (view, owner))
        self._arrays[handle.index] = (view, owner)
        self._views.clear()

    def compute(self, fn, replay=False):
        """fn(chunk) enqueues the chunk's work on chunk.stream (torch ops: done for you).

        replay=True: a run is captured as a CUDA graph and later runs replay it, so fn is
        called once per chunk AT CAPTURE ONLY, not on every run: it must launch the same work
        each time. A run captures again (calling fn) when what it copies or launches changed:
          - it is the first run, or the first after compute() or clear_spans();
          - a rebind() came before it (the graph copies to and from the old memory);
          - its chunks changed: the run after the one that learnt them (adapt_chunks: that
            one is captured with timing marks, the next again without them), or other
            chunk_items, depth or compute streams;
          - the device slots were made anew (spans of wider items, a deeper ring);
          - run(stream) is given another stream than the capture's;
          - where a span's memory is page-locked changed (page-locking or letting go of
            memory beside or inside it cuts its copies elsewhere).
        Memory torch allocates in fn during a capture (ops without out=) comes from a pool of
        the capture's own (torch.cuda.MemPool) that lives until the next capture, clear_spans(),
        compute() or the pipeline's end; a torch without MemPool refuses such a capture.
        Arrays must be pinned or held by the pipeline (host_memory='automatic' page-locks
        them); see sluice::Replay.
        """
        me = weakref.proxy(self)  # the C++ side holds `call`: a strong reference would keep self alive for ever
        device = self.device
        self._core.compute(lambda info: me._call_in_chunk(fn, Chunk(me, info, device)), replay)
        self._capture_pool = None  # the old graph is gone with the old callable
        return self

    def on_chunk_done(self, fn):
        """fn(index, begin, end) once a chunk's outputs are in host memory, in order."""
        self._core.on_chunk_done(fn)
        return self

    def clear_spans(self):
        """Forgets the spans (their handles stop working) and lets go of their arrays."""
        self._core.clear_spans()
        self._handles, self._arrays, self._views = [], [], {}
        self._capture_pool = None  # the graph went with the spans
        return self

    def run(self, stream=None) -> RunReport:
        """Runs to the end. `stream` (a torch stream or a raw handle): order the run after its work, its later work after the run."""
        if stream is not None and not isinstance(stream, int):
            stream = stream.cuda_stream
        self._runs += 1  # a capture in this run gets a pool of its own (_call_captured)
        try:
            return self._core.run(stream)
        finally:
            self._retired_pools = []


Pipeline.__init__.__signature__ = _options.PIPELINE.signature()
Pipeline.__doc__ += "\n\n" + _options.PIPELINE.doc()
