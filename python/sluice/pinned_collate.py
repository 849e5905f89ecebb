"""PinnedCollate: a DataLoader's workers collate each batch straight into page-locked memory that
this process shares with them, so that sluice.Prefetcher copies it to the GPU where it lies.

    loader = DataLoader(dataset, batch_size=64, num_workers=8, collate_fn=sluice.PinnedCollate())
    for images, labels in sluice.Prefetcher(loader):   # no copy on this side before the GPU's
        ...

torch's own collate gives every batch of every worker a new shared-memory file: the worker faults
its pages in, this process maps it, and a pinned copy of it (pin_memory=True, or sluice's
staging) reads all of it again before the GPU can. Here each worker keeps a few slots in one
memory file of its own, made at its first batch and page-locked in this process once, when that
batch arrives. The worker stacks a batch into a free slot, and the slot is the worker's again once
the prefetcher has copied the batch and let it go.

What the loader yields is a SlotBatch, for sluice.Prefetcher, which yields the batch on the GPU as
torch's default_collate would have made it (tensors and NumPy arrays stacked into tensors, Python
numbers into tensors, strings and bytes in lists; dicts, named tuples, tuples and lists of
those). A batch that does not fit a free slot, or that default_collate makes better (samples of
unequal shapes, kinds it does not stack), is made by default_collate as usual. With no workers
(num_workers=0) it is default_collate."""
from __future__ import annotations

import math
import mmap
import os
import threading
import warnings
import weakref

_STATES = 4096      # the region starts with one state byte a slot: 0 free, 1 the worker's batch
_ALIGN = 256        # each tensor's offset in its slot
_GRAIN = 1 << 20    # a slot's bytes, in whole MiB
_FREE, _BUSY = 0, 1
_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable


def _torch():
    import torch
    return torch


def _nbytes(torch, dtype, shape):
    """Bytes of a tensor of this dtype and shape (torch 1.13 has no dtype.itemsize)."""
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


class PinnedCollate:
    """collate_fn for a DataLoader with workers: see the module's docstring. `slots`: batches each
    worker may have in its memory at once (in the DataLoader's queue, or held by this process
    until their tensors go); when all are taken, its next batch is made by default_collate."""

    def __init__(self, slots: int = 4):
        if not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be a whole number of batches, at least 1, not {slots!r}")
        self.slots = slots
        self._region = None  # the worker's own, made in the worker at its first batch

    def __getstate__(self):  # a worker started by spawn makes its own region, as a forked one does
        return {"slots": self.slots, "_region": None}

    def __call__(self, samples):
        torch = _torch()
        collate = torch.utils.data.default_collate
        if torch.utils.data.get_worker_info() is None or not samples:
            return collate(samples)
        try:
            plan = _Plan(torch, samples)
        except _Unsupported:
            return collate(samples)
        if self._region is None:
            self._region = _Region(self.slots, -(-max(plan.bytes, 1) // _GRAIN) * _GRAIN)
        slot = self._region.claim(plan.bytes)
        if slot is None:
            return collate(samples)
        try:
            plan.fill(torch, self._region, slot)
        except BaseException:  # as default_collate would raise it; the slot stays the worker's to reuse
            self._region.map[slot] = _FREE
            raise
        return _Collated(self._region, slot, plan.spec)


class _Unsupported(Exception):
    """A batch that default_collate makes better: samples of unequal shapes or unknown kinds."""


class _Plan:
    """Where each stacked leaf of a batch lies in a slot (spec), and the samples' values for it."""

    def __init__(self, torch, samples):
        self.bytes = 0
        self.leaves = []  # (offset, dtype, shape, values)
        self.spec = self._walk(torch, samples)

    def _leaf(self, torch, values, dtype, shape):
        self.bytes = -(-self.bytes // _ALIGN) * _ALIGN
        offset = self.bytes
        self.bytes += _nbytes(torch, dtype, shape)
        self.leaves.append((offset, dtype, shape, values))
        return ("slot", offset, dtype, shape)

    def _walk(self, torch, values):
        first = values[0]
        kind = type(first)
        if any(type(v) is not kind for v in values):
            raise _Unsupported
        if isinstance(first, torch.Tensor):
            if first.is_cuda or first.is_sparse or any(v.shape != first.shape or v.dtype != first.dtype for v in values):
                raise _Unsupported
            return self._leaf(torch, values, first.dtype, (len(values),) + tuple(first.shape))
        if kind.__module__ == "numpy" and kind.__name__ == "ndarray":
            if first.dtype.kind in "USOV" or any(v.shape != first.shape or v.dtype != first.dtype for v in values):
                raise _Unsupported
            arrays = [torch.from_numpy(v) for v in values]
            return self._leaf(torch, arrays, arrays[0].dtype, (len(values),) + tuple(first.shape))
        if kind is bool:
            return self._leaf(torch, values, torch.bool, (len(values),))
        if kind is int:
            return self._leaf(torch, values, torch.int64, (len(values),))
        if kind is float:
            return self._leaf(torch, values, torch.float64, (len(values),))
        if kind in (str, bytes):
            return ("value", list(values))
        if kind is dict:
            keys = list(first)
            if any(list(v) != keys for v in values):
                raise _Unsupported
            return ("dict", [(k, self._walk(torch, [v[k] for v in values])) for k in keys])
        if kind in (tuple, list) or (issubclass(kind, tuple) and hasattr(kind, "_fields")):
            if any(len(v) != len(first) for v in values):
                raise _Unsupported
            items = [self._walk(torch, list(column)) for column in zip(*values)]
            return ("named", kind, items) if kind not in (tuple, list) else ("list", items)
        raise _Unsupported

    def fill(self, torch, region, slot):
        base = region.slot_offset(slot)
        for offset, dtype, shape, values in self.leaves:
            out = region.tensor(torch, base + offset, dtype, shape)
            if isinstance(values[0], torch.Tensor):
                torch.stack(values, out=out)
            else:
                out.copy_(torch.tensor(values, dtype=dtype))


class _Region:
    """A worker's memory file: state bytes, then `slots` slots of `slot_bytes`. The worker sets a
    slot busy; this process (the only other writer) sets it free once the batch's tensors are gone."""

    def __init__(self, slots, slot_bytes):
        self.slots, self.slot_bytes = slots, slot_bytes
        self.size = _STATES + slots * slot_bytes
        self.fd = os.memfd_create("sluice-batches", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, self.size)
        self.map = mmap.mmap(self.fd, self.size)
        # The worker's pid and the file's inode: a pid is reused once its worker exits, while this
        # process may still hold that worker's file (its last batches alive); the file's inode is
        # not reused while any process holds it open, so a new worker's batches never go to it.
        status = os.fstat(self.fd)
        self.key = (os.getpid(), status.st_dev, status.st_ino)
        self.sent = False  # whether this process's file went with a batch (the first one)

    def slot_offset(self, slot):
        return _STATES + slot * self.slot_bytes

    def claim(self, bytes_):
        if bytes_ > self.slot_bytes:
            return None
        for slot in range(self.slots):
            if self.map[slot] == _FREE:
                self.map[slot] = _BUSY
                return slot
        return None

    def tensor(self, torch, offset, dtype, shape):
        numel = math.prod(shape)
        if numel == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(self.map, dtype=dtype, count=numel, offset=offset).view(shape)


class _Collated:
    """A batch in a slot, as the worker hands it over: pickled as where its tensors lie, and made
    into tensors over this process's mapping of the worker's file when it arrives."""

    def __init__(self, region, slot, spec):
        self.region, self.slot, self.spec = region, slot, spec

    def __reduce__(self):
        region = self.region
        file = None
        if not region.sent:
            from multiprocessing.reduction import DupFd
            file = DupFd(region.fd)
            region.sent = True
        return _arrive, (region.key, file, region.size, region.slot_offset(self.slot), region.slot_bytes,
                         self.slot, self.spec)


# -- this process: the workers' files, mapped and page-locked once each -----------------------------

# Reentrant: a batch in a reference cycle is finalized (_slot_done) by whatever allocation runs the
# cycle collector, which may be one made under this lock on the same thread.
_lock = threading.RLock()
_attached = {}  # region key -> _Attached


class _Attached:
    def __init__(self, key, fd, size):
        self.key, self.fd, self.size = key, fd, size
        self.pid = os.getpid()
        self.map = mmap.mmap(fd, size)
        self.address = _address(self.map)
        self.live = 0  # batches whose tensors are still alive
        self.registered = _page_lock(self.address, size)

    def close(self):
        """Whether it closed: a view of its map's buffer, where one is held, keeps it open."""
        # Each step once, should a collection inside one close it again (see _lock).
        registered, self.registered = self.registered, 0
        if registered:  # its batches are all gone, so no copy reads it
            _torch().cuda.cudart().cudaHostUnregister(registered)
        try:
            self.map.close()
        except BufferError:
            return False
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)
        return True


def _address(buffer):
    import ctypes
    view = (ctypes.c_char * 1).from_buffer(buffer)
    try:
        return ctypes.addressof(view)
    finally:
        del view


def _page_lock(address, size):
    """The mapping's address once page-locked with CUDA (so that copies read it where it lies), or 0
    where there is no CUDA or it fails: the batches are then pageable, and staged as any other."""
    torch = _torch()
    if not torch.cuda.is_available():
        return 0
    # Portable: page-locked for every device's context, whichever thread's device receives the batch.
    error = torch.cuda.cudart().cudaHostRegister(address, size, _REGISTER_PORTABLE)
    if int(getattr(error, "value", error)) != 0:
        warnings.warn(f"sluice.PinnedCollate: page-locking a worker's {size} bytes failed ({error}); "
                      "its batches are copied as pageable memory", RuntimeWarning, stacklevel=2)
        return 0
    return address


def _worker_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _let_go_of_idle_regions():
    """Files of workers that have exited and whose batches are all gone (an epoch's workers, once
    their last batch goes or the next epoch's start): unregistered and unmapped. Under _lock."""
    for key in [k for k, a in _attached.items() if a.live == 0 and _worker_gone(k[0])]:
        attached = _attached.get(key)  # a collection inside close() may have let go of it already
        if attached is not None and attached.close():
            _attached.pop(key, None)


def _slot_done(attached, slot):
    # The slot's tensors are gone (their storage let go of the array below): the worker may reuse it.
    # A fork of this process (another DataLoader's worker) that collects the batch shares the state
    # bytes but not the batch: here it is still read.
    if os.getpid() != attached.pid:
        return
    with _lock:
        attached.map[slot] = _FREE
        attached.live -= 1
        if attached.live == 0:  # its worker may have exited before its last batch went
            _let_go_of_idle_regions()


def _arrive(key, file, size, offset, slot_bytes, slot, spec):
    with _lock:
        attached = _attached.get(key)
        if attached is None:
            if file is None:
                raise RuntimeError("sluice.PinnedCollate: a batch arrived before its worker's memory file")
            _let_go_of_idle_regions()
            fd = file.detach()
            try:
                attached = _Attached(key, fd, size)
            except BaseException:
                os.close(fd)
                raise
            _attached[key] = attached
        attached.live += 1
    return SlotBatch(attached, slot, offset, slot_bytes, spec)


class SlotBatch:
    """A batch that a worker collated into a slot of page-locked memory shared with this process
    (PinnedCollate): sluice.Prefetcher copies its tensors where they lie. Its slot is the worker's
    again once the batch and every tensor of it are gone."""

    def __init__(self, attached, slot, offset, slot_bytes, spec):
        import ctypes
        import numpy as np
        self._spec = spec
        # One array over the slot holds it: every tensor of the batch (and any view of one) keeps the
        # array alive through its storage, so the slot is freed only once all of them are gone. It
        # lies over the slot's address, not the map's buffer, whose view would keep the map open
        # after the last batch: that batch's going unmaps the file of a worker that has exited.
        # Not at exit, where a copy may still read the slot.
        slot_memory = (ctypes.c_uint8 * slot_bytes).from_address(attached.address + offset)
        self._whole = np.frombuffer(slot_memory, dtype=np.uint8)
        weakref.finalize(self._whole, _slot_done, attached, slot).atexit = False

    def tensors(self):
        """The batch as default_collate makes it, its tensors over the slot: page-locked where CUDA
        is, so a copy with non_blocking=True reads them later. Keep them until that copy is done
        (sluice.Prefetcher does): once they are gone the worker writes its next batch there."""
        torch = _torch()
        return _build(torch, torch.from_numpy(self._whole), self._spec)


def _build(torch, slot, spec):
    kind = spec[0]
    if kind == "slot":
        _, offset, dtype, shape = spec
        nbytes = _nbytes(torch, dtype, shape)
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        return slot[offset:offset + nbytes].view(dtype).view(shape)
    if kind == "value":
        return spec[1]
    if kind == "dict":
        return {k: _build(torch, slot, s) for k, s in spec[1]}
    if kind == "list":
        return [_build(torch, slot, s) for s in spec[1]]
    _, named, items = spec
    return named(*[_build(torch, slot, s) for s in items])
