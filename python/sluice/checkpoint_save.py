"""Checkpoints off the GPU at the slower of the link and the disk: save_file writes tensors as a
safetensors file through sluice's durable file sink (sluice::FileSink), the device-to-host copy
of one chunk overlapped with the writes of the chunk before.

The format (https://github.com/huggingface/safetensors, "The format"): an 8-byte little-endian
header size N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}} with an
optional "__metadata__" of str -> str, padded with spaces so that the data starts 8-byte
aligned, then the tensors' bytes, row-major and little-endian, back to back. The tensors are laid
out as safetensors' own writer lays them out (by dtype alignment, largest first, then by name),
so that the two write the same bytes for the same tensors.
"""
from __future__ import annotations

import atexit
import itertools
import json
import os
import queue
import sys
import threading
import traceback

from . import _sluice
from ._arrays import torch_or_none
from .checkpoint import _TORCH_DTYPES

# safetensors' Dtype enum in its order (safetensors/src/tensor.rs), which is increasing alignment:
# its writer sorts by this order descending, then by name.
_DTYPE_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ",
                "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64"]
_RANK = {name: i for i, name in enumerate(_DTYPE_ORDER)}
# A write piece below this is not worth a thread of its own.
_MIN_PIECE = 4 << 20


class SaveHandle:
    """A save running in the background (save_file(..., background=True)).

    wait() returns once the file is in place (synced and renamed over the target) and re-raises
    the save's error if it failed; done() says whether it has finished, either way. A save that
    fails and whose error no wait() raises says so on stderr, naming the file and the error: once
    it has failed and its handle is gone, or at the latest when the interpreter exits."""

    def __init__(self, path, run):
        self.path = path
        self._state = _SaveState(path)
        self._thread = threading.Thread(target=_run_save, args=(self._state, run), name=f"sluice save {path}",
                                        daemon=False)
        self._thread.start()

    @property
    def _error(self):
        return self._state.error

    def done(self):
        return not self._thread.is_alive()

    def wait(self, timeout=None):
        """Blocks until the save has finished (or `timeout` seconds: then returns False)."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return False
        if self._state.error is not None:
            with _failures_lock:
                _unretrieved.pop(self._state.token, None)
            raise self._state.error
        return True

    def __del__(self):
        # As asyncio's "exception was never retrieved": once the handle is gone, no wait() can
        # raise the save's error any more, so the save says it itself (now, or when it fails).
        state = self.__dict__.get("_state")
        if state is None:
            return
        try:
            with _failures_lock:
                state.orphaned = True
                failure = _unretrieved.pop(state.token, None)
        except Exception:  # noqa: BLE001 - the module torn down at exit, after its exit hook told
            return
        if failure is not None:
            _report_failure(*failure)

    def __repr__(self):
        state = "running" if not self.done() else ("failed" if self._error else "done")
        return f"SaveHandle({self.path!r}, {state})"


class _SaveState:
    """What a background save's thread shares with its handle. Not the handle itself (nor does
    its error's traceback reach it), so that a handle dropped while its save runs is collected."""

    def __init__(self, path):
        self.path = path
        self.error = None
        self.orphaned = False  # the handle is gone: no wait() will raise the error
        self.token = next(_tokens)


def _run_save(state, run):
    try:
        run()
    except BaseException as e:  # noqa: BLE001 - handed to wait(), or told on stderr
        _let_go_of_locals(e)
        state.error = e
        with _failures_lock:
            if not state.orphaned:
                _unretrieved[state.token] = (state.path, e)
                return
        _report_failure(state.path, e)


def _let_go_of_locals(error):
    """The error keeps its traceback (where it failed) but not its frames' variables: they hold the
    save's copies of the tensors (on a GPU, the model's size in device memory), which would live
    as long as the error is kept, or until a garbage collection (in a DataLoader worker forked
    meanwhile, that collection frees CUDA memory in a process that cannot touch the device)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__


# Background saves that failed and whose error no wait() has raised yet, whose handles are
# still there: token -> (path, error).
_failures_lock = threading.Lock()
_unretrieved = {}
_tokens = itertools.count()


def _report_failure(path, error):
    try:
        print(f"sluice: the background save of {path} failed, and no wait() raised its error: "
              f"{type(error).__name__}: {error}", file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 - no stderr left to tell it on
        pass


@atexit.register
def _report_unretrieved_failures():
    # atexit runs after threading's shutdown has joined the non-daemon threads, background saves'
    # among them: every save is over by now, and one that failed unseen must not end in silence.
    with _failures_lock:
        failures = list(_unretrieved.values())
        _unretrieved.clear()
    for path, error in failures:
        _report_failure(path, error)


def save_file(tensors, path, metadata=None, *, background=False, chunk_mib=64, staging=3, threads=4):
    """Writes {name: tensor} to `path` as a safetensors file, the file safetensors.torch.save_file
    writes for the same tensors (the same layout, header and bytes).

        sluice.save_file(model.state_dict(), "model.safetensors", {"step": "1200"})
        h = sluice.save_file(model.state_dict(), "model.safetensors", background=True)
        ...                                    # training goes on
        h.wait()                               # the file is in place; re-raises the save's error

    CUDA tensors cross to the host chunk by chunk (chunk_mib each) into `staging` page-locked
    buffers that are reused, on a copy stream that first waits for torch's current stream; while
    the next chunk is copied, `threads` threads write the last one out (in parallel pieces, the
    GIL released). CPU tensors are written straight from their memory. The file is written beside
    the target and only when every byte is in is it synced and renamed over the target (then the
    directory synced): a save that fails leaves the target as it was and removes its new file,
    and raises naming the file and how many bytes it had written (sluice.IoError for a failed
    write, RuntimeError for anything else, the cause chained); a process killed midway leaves the
    target as it was.

    Refused with ValueError before any file is touched: a value that is not a tensor, a name that
    is not a str, tensors whose memory overlaps (as safetensors refuses them: save one and slice
    it at load), a tensor that is not contiguous (call .contiguous(); a hidden copy of a large
    device tensor would take device memory unasked), a sparse tensor, a dtype the format lacks,
    and metadata that is not str -> str.

    background=False returns once the file is in place; it needs no device memory beyond torch's
    and `staging` x chunk_mib of page-locked host memory. background=True returns a SaveHandle at once,
    with a snapshot of the tensors taken: each CUDA tensor is cloned on the device on a side
    stream that waits for torch's current stream, and torch's current stream waits for the clones
    before it runs anything queued after this call, so the host never blocks and training may
    change the weights at once; this takes device memory the size of the CUDA tensors until the
    save ends. CPU tensors are copied in host memory before the call returns (host memory their
    size, and the copy's time). A process that exits with a save in flight waits for it to end
    (the file is then in place); a background save that fails and whose error no wait() raises
    says so on stderr, naming the file and the error, at the latest when the process exits.

    The new file is named after the target, "NAME.sluice-partial-XXXXXX", beside it; one that a
    killed process left is removed by the next save of the same target.
    """
    torch = torch_or_none()
    if torch is None:
        raise RuntimeError("save_file writes torch tensors and torch is not installed")
    if chunk_mib < 1 or staging < 2 or threads < 1:
        raise ValueError("chunk_mib must be at least 1, staging at least 2 and threads at least 1")
    path = os.fspath(path)
    header, entries, total = _plan(torch, tensors, metadata, path)
    chunk_bytes = int(chunk_mib) << 20
    if not background:
        _write(torch, path, header, entries, total, chunk_bytes, staging, _Writers(threads), streams={})
        return None
    entries, streams = _snapshot(torch, entries)
    # Started here, in the caller's thread: a save still running when the script ends then has its
    # writers already (see _Writers).
    writers = _Writers(threads)
    try:
        return SaveHandle(path, lambda: _write_copies(torch, path, header, entries, total, chunk_bytes, staging,
                                                      writers, streams))
    except BaseException:
        writers.shutdown()
        raise


def _plan(torch, tensors, metadata, path):
    """(header bytes, [(name, tensor, begin, end)] in file order with absolute offsets, file bytes),
    or a ValueError for anything the file cannot hold."""
    if not isinstance(tensors, dict):
        raise ValueError(f"{path}: save_file takes a dict of name -> tensor, not a {type(tensors).__name__}")
    names = {getattr(torch, t, None): f for f, t in _TORCH_DTYPES.items()}
    names.pop(None, None)
    rows = []
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise ValueError(f"{path}: tensor names must be str, not {type(name).__name__} ({name!r})")
        if name == "__metadata__":
            raise ValueError(f"{path}: '__metadata__' is the header's metadata, not a tensor name")
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{path}: '{name}' is a {type(t).__name__}, not a torch tensor")
        if t.layout != torch.strided:
            raise ValueError(f"{path}: '{name}' is a sparse tensor: save t.to_dense()")
        if t.dtype not in names:
            raise ValueError(f"{path}: '{name}' is {t.dtype}, which the safetensors format has no dtype for")
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{path}: '{name}' is on {t.device}; save_file saves CPU and CUDA tensors")
        if not t.is_contiguous():
            raise ValueError(f"{path}: '{name}' is not contiguous: save t.contiguous() (safetensors refuses it too)")
        # A snapshot of a parameter needs no autograd; a conjugate or negative view (t.conj()) is
        # contiguous but its memory holds the values unconjugated: resolved, as a copy, first.
        rows.append((name, t.detach().resolve_conj().resolve_neg(), names[t.dtype]))
    _refuse_shared(rows, path)
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise ValueError(f"{path}: metadata must be a dict of str -> str")
    rows.sort(key=lambda r: (-_RANK[r[2]], r[0]))
    head, entries, at = {}, [], 0
    if metadata is not None:
        head["__metadata__"] = dict(metadata)
    for name, t, dtype in rows:
        n = t.numel() * t.element_size()
        head[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [at, at + n]}
        entries.append((name, t, at, at + n))
        at += n
    # serde_json's compact form, non-ASCII as UTF-8: safetensors' header, byte for byte.
    text = json.dumps(head, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    header = len(text).to_bytes(8, "little") + text
    data_begin = len(header)
    return header, [(n, t, data_begin + b, data_begin + e) for n, t, b, e in entries], data_begin + at


def _refuse_shared(rows, path):
    """Tensors whose bytes overlap would be written twice and loaded as two (safetensors refuses them)."""
    spans = sorted((str(t.device), t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), name)
                   for name, t, _ in rows if t.numel())
    for (dev_a, _, end_a, a), (dev_b, begin_b, _, b) in zip(spans, spans[1:]):
        if dev_a == dev_b and begin_b < end_a:
            raise ValueError(f"{path}: '{a}' and '{b}' share memory: save one of them (safetensors refuses "
                             "shared tensors too; slice the saved one at load)")


def _snapshot(torch, entries):
    """Copies of the tensors that later work cannot change, taken without blocking the host:
    (entries of the copies, {device index: the side stream that made them})."""
    streams, events, out = {}, {}, []
    for name, t, begin, end in entries:
        if not t.is_cuda:
            out.append((name, t.clone(), begin, end))
            continue
        index = t.device.index
        if index not in streams:
            streams[index] = torch.cuda.Stream(device=index)
            # The clones read what the work queued so far leaves in the tensors.
            streams[index].wait_stream(torch.cuda.current_stream(index))
        with torch.cuda.device(index), torch.cuda.stream(streams[index]):
            copy = t.clone(memory_format=torch.contiguous_format)
        # The caller may free the tensor at once; its memory goes to no other stream's work
        # before the clone has read it.
        t.record_stream(streams[index])
        out.append((name, copy, begin, end))
    for index, stream in streams.items():
        events[index] = torch.cuda.Event()
        events[index].record(stream)
        # Work queued after this call (an optimizer step that changes the weights) runs after the clones.
        torch.cuda.current_stream(index).wait_event(events[index])
    return out, streams


class _Progress:
    """Bytes written so far, from any thread, for the message of a save that fails."""

    def __init__(self):
        self._lock = threading.Lock()
        self.bytes = 0

    def add(self, n):
        with self._lock:
            self.bytes += n


def _pieces(length, threads):
    """[(offset within, length)]: one write split for `threads` threads, no piece below _MIN_PIECE."""
    count = max(1, min(threads, length // _MIN_PIECE))
    step = -(-length // count)
    return [(off, min(step, length - off)) for off in range(0, length, step)]


class _Piece:
    """One write handed to the writers; result() waits for it and re-raises its error."""

    def __init__(self, fn, args):
        self._fn, self._args = fn, args
        self._error = None
        self._done = threading.Event()

    def run(self, cancelled):
        if cancelled:
            self._error = RuntimeError("not written: the save was stopping")
        else:
            try:
                self._fn(*self._args)
            except BaseException as e:  # noqa: BLE001 - handed to result()
                self._error = e
        self._fn = self._args = None
        self._done.set()

    def result(self):
        self._done.wait()
        if self._error is not None:
            raise self._error


class _Writers:
    """A save's own writer threads, started when save_file is called, in the caller's thread.

    Not concurrent.futures: at interpreter exit, threading's shutdown first runs concurrent.futures'
    exit hook, after which its pools refuse new work ("cannot schedule new futures after interpreter
    shutdown"), and only then joins the threads still running, a background save's among them: a
    save in flight when the script ended failed there, and its file was never written. These take
    work until their save shuts them down. Daemon threads: the save (the caller's thread, or a
    background save's own, which is not a daemon) waits for every write it hands them, and one
    left idle must not hold the process at exit."""

    def __init__(self, count):
        self.count = count
        self._work = queue.SimpleQueue()
        self._stopping = False
        self._threads = []
        try:
            for _ in range(count):
                thread = threading.Thread(target=self._serve, name="sluice save writer", daemon=True)
                thread.start()
                self._threads.append(thread)
        except BaseException:
            self.shutdown()
            raise

    def _serve(self):
        while True:
            piece = self._work.get()
            if piece is None:
                return
            piece.run(self._stopping)

    def submit(self, fn, *args):
        piece = _Piece(fn, args)
        self._work.put(piece)
        return piece

    def shutdown(self):
        """Waits for the write each thread is in; those not begun are not written."""
        self._stopping = True
        for _ in self._threads:
            self._work.put(None)
        for thread in self._threads:
            thread.join()


def _write_copies(torch, path, header, copies, total, chunk_bytes, staging, writers, streams):
    """_write of a background save's copies, which it lets go of as it ends, written or not: the
    error it may raise is kept for wait(), and its traceback's frames must not keep them (see
    _let_go_of_locals)."""
    try:
        _write(torch, path, header, copies, total, chunk_bytes, staging, writers, streams)
    finally:
        copies.clear()


def _write(torch, path, header, entries, total, chunk_bytes, staging, writers, streams):
    copy_streams = dict(streams)
    try:
        sink = _sluice._FileSink(path, total)
        progress = _Progress()
        sink.begin()
    except BaseException:
        writers.shutdown()
        raise
    try:
        try:
            sink.write(0, header)
            progress.add(len(header))
            pieces = []
            for _, t, begin, end in entries:
                if end > begin and not t.is_cuda:
                    pieces += _submit(writers, sink, progress, begin, t.data_ptr(), end - begin, None)
            cuda = [(t, begin, end) for _, t, begin, end in entries if end > begin and t.is_cuda]
            if cuda:
                _write_staged(torch, writers, sink, progress, cuda, chunk_bytes, staging, copy_streams)
            for p in pieces:
                p.result()
        finally:
            # No write may be left running when the sink commits or removes its new file.
            writers.shutdown()
            for stream in copy_streams.values():
                stream.synchronize()  # nor a copy into staging memory that goes back to torch
    except BaseException as e:
        sink.abandon()
        if not isinstance(e, Exception):
            raise
        what = f"{path}: save abandoned after {progress.bytes} of {total} bytes were written (the file is as it was): {e}"
        raise (_sluice.IoError if isinstance(e, OSError) else RuntimeError)(what) from e
    # Its own errors say whether the target was replaced (a directory that failed to sync after the rename).
    sink.commit()


def _submit(writers, sink, progress, offset, address, length, event):
    def piece(at, n):
        if event is not None:
            event.synchronize()  # the chunk is in the staging buffer (the GIL is released meanwhile)
        sink.write(offset + at, address + at, n)
        progress.add(n)
    return [writers.submit(piece, at, n) for at, n in _pieces(length, writers.count)]


def _write_staged(torch, writers, sink, progress, cuda, chunk_bytes, staging, copy_streams):
    """The CUDA tensors' bytes through sluice's ring to the host, one device at a time: the copy of
    chunk i+1 off the device runs while `threads` threads write chunk i out of its staging slot."""
    by_device = {}
    for t, begin, end in cuda:
        by_device.setdefault(t.device.index, []).append((t.data_ptr(), end - begin, begin))
    for device, rows in by_device.items():
        # The copies read what the work queued so far leaves in the tensors: a background save's
        # side stream that made its copies, else torch's current stream.
        stream = copy_streams.get(device) or torch.cuda.current_stream(device)
        writes = _sluice._DeviceWrites()
        try:
            writes.run(sink, device, stream.cuda_stream, rows, chunk_bytes, staging, writers.count)
        finally:
            progress.add(writes.written)
