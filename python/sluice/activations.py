"""A training step's activations in page-locked host memory between its forward and its backward:
OffloadActivations plugs into torch.autograd.graph.saved_tensors_hooks, copies each large saved
tensor to the host on a copy stream as the forward saves it, and copies it back on that stream a
few tensors ahead of the backward that needs it."""
from __future__ import annotations

import collections
import dataclasses
import threading

from . import _options
from ._arrays import torch_or_none
from ._devices import cuda_index
from ._offload_copies import CudaCopies, HostCopies

# Offsets of the tensors in a pinned buffer: the copy engines' and every dtype's alignment.
_ALIGN = 256
# Pinned buffers are at least this big (torch's host allocator rounds each to a power of two,
# so they are powers of two): a step's tensors share a few large buffers, not one each.
_BUFFER_BYTES = 64 << 20
_MOST_AHEAD = _options.MOST_AHEAD
# OffloadActivations entered on this thread (saved-tensor hooks are per thread, and the inner of
# two nested hooks would take every tensor from the outer).
_entered = threading.local()


@dataclasses.dataclass
class OffloadReport:
    """What one step did. The forward's counts are final when its `with` ends; fetched_bytes grows
    as its backward runs (a tensor unpacked twice is fetched twice)."""
    offloaded_tensors: int = 0
    offloaded_bytes: int = 0  # copied to the host (D2H), each saved tensor's own bytes
    kept_tensors: int = 0     # smaller than min_bytes: left on the device
    kept_bytes: int = 0
    weights: int = 0          # parameters and leaves that require grad: left where they are
    fetched_bytes: int = 0    # copied back (H2D) for the backward
    pool_bytes: int = 0       # page-locked memory of the pool once the forward ended


class OffloadActivations:
    """Saved activations of a training step held in page-locked host memory, not on the GPU.

        offload = sluice.OffloadActivations(min_bytes=1 << 20)     # made once, reused every step
        for inputs, targets in batches:
            with offload:
                loss = model(inputs, targets)
            loss.backward()
            optimizer.step(); optimizer.zero_grad(set_to_none=True)

    Inside `with`, every tensor autograd saves for the backward that lies on `device` and holds at
    least `min_bytes` is copied to page-locked host memory on a copy stream of its own, which
    waits for the forward's stream on the GPU (never the host); the forward's tensor is let go as
    soon as that copy has run, so its memory returns to torch's allocator. With `outgoing`
    tensors on their way out (2 x `ahead` unless given), the host waits for the oldest copy before
    it saves one more: a host far ahead of the GPU would otherwise keep all it saved meanwhile on
    the device, and the peak would depend on how far ahead it ran. outgoing=None never waits: where
    the link is slower than the compute, the forward then runs ahead of its copies out, and the
    tensors not yet copied as it ends stay on the device for the backward (faster, a higher peak).
    Parameters (leaves that
    require grad, and views of them such as the weight.t() Linear saves) stay where they are, as do
    smaller tensors and those on other devices. Under
    autocast the low-precision copies of the weights are activations like any other.

    The backward takes the tensors back in about the reverse order: taking one makes torch's
    current stream wait for its copy on the GPU and starts copying the next `ahead` expected
    (the ones saved just before it) into device memory taken on that stream, so that the copies
    run behind the backward's kernels while the link allows: hidden when the step's bytes over
    the link (both ways) take less time than its compute. The copies back run on a stream of
    their own (the other copy engine), so they never queue behind the forward's copies out. As
    the `with` ends, the last tensors whose copies out have not run yet are kept where they lie
    for the backward (which wants them first), and the next ones start back. A tensor taken
    twice (retain_graph) or out of order is copied again.

    A saved tensor changed in place after it was saved raises at the backward the RuntimeError
    plain torch raises ("modified by an inplace operation"): torch makes that check only for what
    it saves itself, not under saved-tensor hooks, so OffloadActivations makes it, for the tensors
    it offloads (whose copy may hold either values) and those it leaves where they lie alike.

    Values are the saved tensor's, bit for bit, with its dtype, shape and strides; a tensor that
    is not dense in memory (a slice of a larger one, such as attention's q, k and v split from
    one projection) is first copied densely on the device, in the same order of strides (as
    torch.clone does), and comes back as that dense copy.

    Host memory: a pool of page-locked buffers of at least 64 MiB, each tensor at a 256-byte
    aligned offset; a step's buffers return to the pool when autograd lets go of its last saved
    tensor (after its backward, or when its graph is dropped after an exception), so the pool
    grows to the largest step (or steps alive at once) and then stops. `pool_bytes` is its size,
    `last_step` the report of the latest forward, `release_pool()` frees the buffers not in use.

    One `with` at a time: entering it again while it is open (nested, or on another thread), or
    inside another OffloadActivations on the same thread, raises RuntimeError. The hooks are
    torch's per-thread saved-tensor hooks: only the forward run on the entering thread is
    offloaded. Hooks pushed inside the forward take the tensors saved under them: the blocks of a
    StreamedLayers in training keep their own (their saved weights as tokens), so activations saved
    inside streamed blocks are not offloaded. The next step's copies to the host reuse the pool's
    buffers after torch's stream at that point: run consecutive steps on one stream (the usual
    loop), or a copy out could overwrite a buffer a copy back still reads. `_host_executor` runs
    the same engine with CPU tensors as the "device" and plain copies for the streams' (for tests
    without a GPU).
    """

    def __init__(self, *, min_bytes=1 << 20, ahead=4, outgoing="2 x ahead", device=None, _host_executor=None):
        torch = self._torch = torch_or_none()
        if torch is None:
            raise RuntimeError("OffloadActivations offloads torch tensors and torch is not installed")
        if not hasattr(torch.autograd.graph, "saved_tensors_hooks"):
            raise RuntimeError(f"OffloadActivations needs torch.autograd.graph.saved_tensors_hooks (torch 1.10 "
                               f"or later); this is torch {torch.__version__}")
        if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 1:
            raise ValueError(f"min_bytes must be a whole number of bytes, at least 1 (got {min_bytes!r})")
        if isinstance(ahead, bool) or not isinstance(ahead, int) or not 1 <= ahead <= _MOST_AHEAD:
            raise ValueError(f"ahead must be 1 to {_MOST_AHEAD} tensors (got {ahead!r})")
        if outgoing == "2 x ahead":
            outgoing = 2 * ahead
        if outgoing is not None and (isinstance(outgoing, bool) or not isinstance(outgoing, int) or outgoing < 1):
            raise ValueError(f"outgoing must be a whole number of tensors, at least 1, or None (got {outgoing!r})")
        self._min_bytes, self._ahead, self._outgoing = min_bytes, ahead, outgoing
        if _host_executor is not None:
            self._copies = HostCopies(torch, **(_host_executor if isinstance(_host_executor, dict) else {}))
        else:
            self._copies = CudaCopies(torch, cuda_index(torch, device))
        self._lock = threading.Lock()
        self._open = None        # the step whose forward is running
        self._steps = set()      # steps whose saved tensors autograd still holds
        self._dead = collections.deque()  # steps of handles let go, counted under the lock (see _Saved.__del__)
        self._buffers = []       # every pinned buffer, in the order made
        self._free = []          # those no step holds, in the order made
        self._reading = collections.deque()  # (copy's event, device bytes it reads, record): kept until the copy ran
        self._hooks = None
        self.last_step = None

    @property
    def device(self):
        return self._copies.device

    @property
    def ahead(self):
        return self._ahead

    @property
    def min_bytes(self):
        return self._min_bytes

    @property
    def outgoing(self):
        """Tensors that may be on their way out before the forward waits (None: it never does)."""
        return self._outgoing

    @property
    def pool_bytes(self):
        """Page-locked bytes the pool holds, in use or free."""
        with self._lock:
            self._drain()
            return sum(b.numel() for b in self._buffers)

    @property
    def live_steps(self):
        """Steps whose saved tensors autograd still holds (0 once each backward has run)."""
        with self._lock:
            self._drain()
            return len(self._steps)

    def release_pool(self):
        """Frees the pool's buffers that no step holds (torch's host allocator keeps them cached)."""
        with self._lock:
            self._drain()
            held = {id(b) for s in self._steps for b in s.buffers}
            self._buffers = [b for b in self._buffers if id(b) in held]
            self._free = []

    # The step: `with` around its forward.

    def __enter__(self):
        torch = self._torch
        if getattr(_entered, "offload", None) is not None:
            raise RuntimeError("an OffloadActivations is already open on this thread: saved-tensor hooks nest, and "
                               "the inner one would take the outer one's tensors; open one `with` per forward")
        with self._lock:
            if self._open is not None:
                raise RuntimeError("this OffloadActivations is open on another thread: one forward at a time "
                                   "(make one OffloadActivations per thread)")
            self._drain()
            self._open = _Step(self)
        hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        try:
            hooks.__enter__()
        except BaseException:
            with self._lock:
                self._open = None
            raise
        self._hooks = hooks
        _entered.offload = self
        return self

    def __exit__(self, *exc):
        hooks, self._hooks = self._hooks, None
        _entered.offload = None
        try:
            hooks.__exit__(*exc)
        finally:
            with self._lock:
                self._drain()
                step, self._open = self._open, None
                step.closed = True
                step.report.pool_bytes = sum(b.numel() for b in self._buffers)
                self.last_step = step.report
                if step.live:
                    self._steps.add(step)
                    if exc[0] is None:
                        self._let_go_read()
                        step.keep_unread(self._copies.current())
                        step.fetch_ahead(len(step.records))  # the backward starts with the last tensors saved
                else:
                    step.release()
        return False

    # The hooks.

    def _pack(self, tensor):
        torch = self._torch
        step = self._open
        if step is None or not self._copies.is_device(tensor):
            return _Kept(tensor)
        # A weight saved as a view of itself (Linear saves weight.t()) is still a weight.
        base = tensor._base if tensor._is_view() else tensor
        if isinstance(base, torch.nn.Parameter) or (base.requires_grad and base.is_leaf):
            step.report.weights += 1
            return _Kept(tensor)
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes < self._min_bytes:
            step.report.kept_tensors += 1
            step.report.kept_bytes += nbytes
            return _Kept(tensor)
        # A host far ahead of the GPU (a forward enqueued long before the GPU runs it) would keep
        # every tensor saved meanwhile in device memory until its copy out ran, and save none: past
        # `outgoing` tensors on their way out, it waits for the oldest copy (not under the lock, so
        # that a backward on another thread goes on). It waits only while it is that far ahead; the
        # GPU runs the work already enqueued meanwhile.
        while True:
            with self._lock:
                self._drain()
                self._let_go_read()
                if self._outgoing is None or len(self._reading) < self._outgoing:
                    return step.offload(tensor, nbytes)
                oldest = self._reading[0][0]
            self._copies.host_wait(oldest)

    def _unpack(self, saved):
        if isinstance(saved, _Kept):
            return saved.unpack()
        if not isinstance(saved, _Saved):
            return saved
        with self._lock:
            self._drain()
            self._let_go_read()
            return saved.step.take(saved.index)

    # Bookkeeping, under the lock.

    def _let_go_read(self):
        # The copy stream runs its copies in order: the first not done ends the scan.
        while self._reading and self._copies.done(self._reading[0][0]):
            self._reading.popleft()

    def _drain(self):
        while self._dead:
            step = self._dead.popleft()
            step.live -= 1
            if step.live == 0 and step.closed and step in self._steps:
                self._steps.discard(step)
                step.release()

    def _lease(self, nbytes):
        """A free buffer of at least nbytes (the first made, so steps alike reuse the same ones), or a new one."""
        for k, b in enumerate(self._free):
            if b.numel() >= nbytes:
                return self._free.pop(k)
        size = getattr(self._copies, "buffer_bytes", _BUFFER_BYTES)
        while size < nbytes:
            size *= 2
        b = self._copies.host_bytes(size)
        self._buffers.append(b)
        return b

    def _give_back(self, buffers):
        made = {id(b): k for k, b in enumerate(self._buffers)}
        self._free = sorted(self._free + [b for b in buffers if id(b) in made], key=lambda b: made[id(b)])


class _Saved:
    """What autograd holds in place of an offloaded tensor. Its end (autograd letting go of the saved
    tensor) tells the step; the count is kept under the lock at the next safe point, since this may
    run on any thread, or inside the lock when a collection starts there."""
    __slots__ = ("step", "index", "__weakref__")

    def __init__(self, step, index):
        self.step, self.index = step, index

    def __del__(self):
        owner = self.step.owner
        owner._dead.append(self.step)  # deque.append: safe from any thread
        if owner._lock.acquire(blocking=False):
            try:
                owner._drain()
            finally:
                owner._lock.release()


def _changed_in_place(what, now, saved):
    """The error torch raises at the backward for a saved tensor changed in place after it was
    saved. Torch skips its check under saved-tensor hooks, so the hooks make it themselves."""
    return RuntimeError(
        f"one of the variables needed for gradient computation has been modified by an inplace operation: "
        f"[{what}] is at version {now}; expected version {saved} instead (sluice.OffloadActivations saved it; "
        f"torch does not check tensors saved under saved-tensor hooks, so OffloadActivations does). Hint: "
        f"clone the tensor before changing it in place, or change it before the operation that saves it.")


def _described(t):
    return f"{t.type()} {list(t.shape)}"


def _version_watch(torch, tensor):
    """A tensor that shares `tensor`'s version counter (as its views and .detach() do) and none of
    its memory: the version of an offloaded tensor can be read after its memory is let go. Its
    storage is emptied with the version counter left alone (set_ would count as a change of the
    tensor itself); where torch lacks the dispatch guard for that, None."""
    C = torch._C
    watch = tensor.detach()  # before the guard: detach shares the version counter in the kernel the guard skips
    try:
        guard = C.ExcludeDispatchKeyGuard(C.DispatchKeySet(C.DispatchKey.ADInplaceOrView))
    except (AttributeError, TypeError):
        return None
    try:
        watch.set_()
    except RuntimeError:  # a torch that refuses to change a detached tensor's storage: no watch
        return None
    finally:
        del guard
    return watch


class _Kept:
    """A saved tensor left where it lies (a weight, or smaller than min_bytes), with its version
    then: unpacked, it is checked as torch checks the tensors it saves itself."""
    __slots__ = ("tensor", "version")

    def __init__(self, tensor):
        self.tensor, self.version = tensor, tensor._version

    def unpack(self):
        if self.tensor._version != self.version:
            raise _changed_in_place(_described(self.tensor), self.tensor._version, self.version)
        return self.tensor


class _Record:
    __slots__ = ("nbytes", "dtype", "shape", "stride", "host", "written", "device", "ready", "stream", "pass_taken",
                 "version", "watch", "described")

    def __init__(self, nbytes, dtype, shape, stride, host):
        self.nbytes, self.dtype, self.shape, self.stride, self.host = nbytes, dtype, shape, stride, host
        # The saved tensor's version when saved, a watch on its version (_version_watch), and how
        # the error names it: torch checks the version of what it saves itself, not under hooks.
        self.version, self.watch, self.described = 0, None, ""
        self.written = None  # the event of the copy to the host
        self.device = self.ready = self.stream = None  # a copy on the device: its bytes, its copy's event, its stream
        self.pass_taken = -1


class _Step:
    """One forward's offloaded tensors, in the order saved, and the pinned buffers they lie in."""

    def __init__(self, owner):
        self.owner = owner
        self.copies = owner._copies
        self.report = OffloadReport()
        self.records = []
        self.buffers = []
        self.top = 0          # bytes used in the last buffer
        self.live = 0         # _Saved handles autograd holds
        self.closed = False   # the forward ended
        self.frontier = None  # the lowest index taken in this pass of the backward
        self.passes = 0

    def offload(self, tensor, nbytes):
        torch = self.owner._torch
        with torch.no_grad():
            source = tensor.detach()
            if not _dense(source):
                source = source.clone()  # dense, in the same order of strides
        record = _Record(nbytes, source.dtype, tuple(source.shape), source.stride(), self._host_slice(nbytes))
        record.version, record.watch, record.described = tensor._version, _version_watch(torch, tensor), _described(tensor)
        # The first element is the lowest address of a dense tensor: its memory is one run of bytes.
        flat = source.as_strided((source.numel(),), (1,)).view(torch.uint8)
        record.written = self.copies.copy(record.host, flat, ("d2h", len(self.records)))
        self.owner._reading.append((record.written, flat, record))  # the forward's memory stays allocated until read
        self.records.append(record)
        self.report.offloaded_tensors += 1
        self.report.offloaded_bytes += nbytes
        self.live += 1
        return _Saved(self, len(self.records) - 1)

    def keep_unread(self, stream):
        """The forward's last tensors whose copies to the host have not run yet are still in device
        memory, and are the backward's first: it takes them there, not back over the link."""
        mine = {id(r) for r in self.records}
        # Made on the forward's stream: a backward that runs on another waits for it.
        made = None
        for _, flat, record in self.owner._reading:
            if id(record) in mine and record.device is None:
                made = made or self.copies.mark(stream)
                record.device, record.ready, record.stream = flat, made, stream

    def _host_slice(self, nbytes):
        at = -(-self.top // _ALIGN) * _ALIGN
        if not self.buffers or at + nbytes > self.buffers[-1].numel():
            self.buffers.append(self.owner._lease(nbytes))
            at = 0
        self.top = at + nbytes
        return self.buffers[-1][at:at + nbytes]

    def fetch(self, k):
        record = self.records[k]
        if record.device is None:
            record.stream = self.copies.current()
            record.device = self.copies.device_bytes(record.nbytes)  # on the stream that will read it
            record.ready = self.copies.copy(record.device, record.host, ("h2d", k), after=record.written)
            self.report.fetched_bytes += record.nbytes

    def fetch_ahead(self, below):
        """Starts the copies of the `ahead` tensors not yet taken in this pass, saved just before index `below`."""
        wanted = self.owner._ahead
        k = below - 1
        while wanted and k >= 0:
            if self.records[k].pass_taken != self.passes:
                self.fetch(k)
                wanted -= 1
            k -= 1

    def take(self, k):
        record = self.records[k]
        # Changed in place since it was saved: its copy may hold either values, and torch refuses it.
        if record.watch is not None and record.watch._version != record.version:
            raise _changed_in_place(record.described, record.watch._version, record.version)
        if record.pass_taken == self.passes:
            self.passes += 1  # a tensor taken again: another backward over the same graph (retain_graph)
            self.frontier = None
        record.pass_taken = self.passes
        self.frontier = k if self.frontier is None else min(self.frontier, k)
        self.fetch(k)
        stream = self.copies.current()
        if record.ready is not None:
            self.copies.wait(stream, record.ready)  # the GPU waits for the copy, the host does not
        if stream != record.stream:
            # Memory taken on another stream returns to that stream's pool when freed: tell the allocator
            # that this stream reads it too, or it could be reused there while this stream still reads.
            self.copies.also_used_on(record.device, stream)
        device, record.device = record.device, None  # autograd's now; taken again, it is copied again
        self.fetch_ahead(self.frontier)
        return device.view(record.dtype).as_strided(record.shape, record.stride)

    def release(self):
        """The pinned buffers go back to the pool; copies made ahead and never taken are let go after
        their stream has waited for them (its allocator may hand their memory out at once)."""
        for record in self.records:
            if record.device is not None and record.ready is not None:
                self.copies.wait(record.stream, record.ready)
                record.device = None
        self.records = []
        self.owner._give_back(self.buffers)
        self.buffers = []


def _dense(t):
    """Whether t's elements fill one run of memory with no gaps and no overlaps (any order of strides)."""
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True
