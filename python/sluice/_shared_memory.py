"""The file behind a host tensor that another process sent through shared memory (a DataLoader
worker's batch, passed by torch.multiprocessing with its file descriptor): staging reads such a
tensor with pread from that file, so this process never touches its pages through torch's mapping
of the file. Touching them (page faults) and tearing the mappings down when the batch is let go
cost a DataLoader of 8 workers a quarter of its rate on a 16-core machine; read from the file,
3-9 %."""
from __future__ import annotations

NONE = (-1, 0)


class SharedFiles:
    """Which storages of this process came from another process by file descriptor, as of now:
    torch records each such storage in torch.multiprocessing's shared cache under the file's
    (inode, device), and so each one this process sent by descriptor, which torch moved into such
    a file then (a received CUDA storage's key is a tuple too, but no CPU tensor's storage is one).
    Only those are asked for their descriptor: asking any other storage would move it into new
    shared memory (a copy) to make one. Each entry's weak reference keeps its storage's address
    from being reused, so a dead entry never names a live storage."""

    def __init__(self):
        self._received = None  # weak references of the storages received by descriptor, read once

    def _received_refs(self):
        if self._received is None:
            self._received = set()
            try:
                from torch.multiprocessing import reductions
                cache = reductions.shared_cache
                with cache.lock:
                    items = list(cache.items())
                self._received = {ref for key, ref in items if isinstance(key, tuple)}
                self._weak_ref = reductions.StorageWeakRef
            except Exception:  # noqa: BLE001 - another torch's internals: every tensor is read where it lies
                pass
        return self._received

    def of(self, tensor):
        """(descriptor, byte offset) of the file holding the contiguous CPU tensor, or (-1, 0)."""
        try:
            storage = tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else tensor.storage()
            if tensor.numel() == 0 or not storage.is_shared():
                return NONE
            received = self._received_refs()
            if not received or self._weak_ref(storage) not in received:
                return NONE
            fd = storage._share_fd_cpu_()[0]
            offset = tensor.data_ptr() - storage.data_ptr()
            return (fd, offset) if fd >= 0 and offset >= 0 else NONE
        except Exception:  # noqa: BLE001 - as above
            return NONE
