"""sluice.save_file: tensors to a safetensors file through the durable file sink. Each file is
checked three ways: read back by sluice.load_file (on the host ring executor where there is no
GPU), parsed here by hand from the format's description (8-byte little-endian header size, JSON
header, the tensors' bytes at their offsets), and, where the safetensors package is installed,
read by its loader and compared byte for byte with the file its writer makes. Most tests save CPU
tensors, so that they run where there is no GPU; the last ones save CUDA tensors."""
import gc
import json
import signal
import struct
import subprocess
import sys
import time
import weakref

import pytest

import sluice
from conftest import gpu, torch_or_skip
from safetensors_cases import FORMAT_NAMES as _FORMAT
from safetensors_cases import raw_bytes as _raw
from safetensors_cases import sample_tensors as _tensors

HOST = {"jitter_us": 30}
MiB = 1 << 20
# safetensors' writer lays tensors out by dtype size, largest first (its Dtype order), then by name.
_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64",
          "I64", "U64"]


def _read_by_hand(torch, path):
    """(metadata, {name: (format dtype, shape, bytes)}, [names in file order]) from the file's bytes."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    assert (8 + n) % 8 == 0, "the data starts 8-byte aligned"
    text = data[8:8 + n]
    assert text.rstrip(b" ") == text.rstrip(), "the header is padded with spaces"
    header = json.loads(text)
    metadata = header.pop("__metadata__", None)
    at, tensors = 0, {}
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, end = e["data_offsets"]
        assert begin == at, f"{name} starts where the tensor before ends"
        tensors[name] = (e["dtype"], e["shape"], data[8 + n + begin:8 + n + end])
        at = end
    assert 8 + n + at == len(data), "the file ends where the last tensor does"
    return metadata, tensors, list(tensors)


def _check_file(torch, path, want, metadata=None):
    got_meta, by_hand, order = _read_by_hand(torch, path)
    assert got_meta == metadata
    assert set(by_hand) == set(want)
    for name, t in want.items():
        dtype, shape, data = by_hand[name]
        assert dtype == _FORMAT[str(t.dtype).split(".")[1]] and shape == list(t.shape), name
        assert data == _raw(torch, t), name
    assert order == sorted(want, key=lambda k: (-_ORDER.index(by_hand[k][0]), k))
    loaded = sluice.load_file(path, _host_executor=HOST, chunk_mib=1)
    for name, t in want.items():
        assert loaded[name].dtype == t.dtype and loaded[name].shape == t.shape, name
        assert _raw(torch, loaded[name]) == _raw(torch, t), name


def _leftovers(directory, keep):
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


def test_every_dtype_and_shape_is_written_as_the_format_says(tmp_path):
    torch = torch_or_skip()
    want = _tensors(torch, big=True)
    want["param"] = torch.nn.Parameter(torch.randn(3, 2))  # as named_parameters() gives them
    path = tmp_path / "m.safetensors"
    assert sluice.save_file(want, path, {"format": "pt", "step": "12"}, chunk_mib=1, threads=3) is None
    _check_file(torch, path, want, {"format": "pt", "step": "12"})
    assert sluice.read_header(path)["metadata"] == {"format": "pt", "step": "12"}
    assert _leftovers(tmp_path, {"m.safetensors"}) == []


def test_no_tensors_is_the_empty_header_and_a_target_is_replaced(tmp_path):
    torch = torch_or_skip()
    path = tmp_path / "e.safetensors"
    path.write_bytes(b"an older file, longer than the new one" * 10)
    sluice.save_file({}, path)
    assert path.read_bytes() == struct.pack("<Q", 8) + b"{}" + b" " * 6
    sluice.save_file({"a": torch.ones(2)}, str(path))
    _check_file(torch, path, {"a": torch.ones(2)})


def test_the_formats_own_examples_come_out_byte_for_byte(tmp_path):
    # The expected files of safetensors' own tests (safetensors/src/tensor.rs: test_serialization,
    # test_serialization_forced_alignement, test_empty), written out here.
    torch = torch_or_skip()
    data = struct.pack("<6f", 0, 1, 2, 3, 4, 5)
    text = b'{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}'
    sluice.save_file({"attn.0": torch.arange(6, dtype=torch.float32).reshape(1, 2, 3)}, tmp_path / "a")
    assert (tmp_path / "a").read_bytes() == struct.pack("<Q", 64) + text + data
    text = b'{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}' + b" " * 7
    sluice.save_file({"attn0": torch.arange(6, dtype=torch.float32).reshape(1, 1, 2, 3)}, tmp_path / "b")
    assert (tmp_path / "b").read_bytes() == struct.pack("<Q", 72) + text + data
    sluice.save_file({}, tmp_path / "c", {"framework": "pt"})
    assert (tmp_path / "c").read_bytes() == struct.pack("<Q", 40) + b'{"__metadata__":{"framework":"pt"}}' + b" " * 5


def test_it_writes_the_bytes_safetensors_writes_and_safetensors_reads_them(tmp_path):
    torch = torch_or_skip()
    st = pytest.importorskip("safetensors.torch", reason="the safetensors package is not installed")
    want = _tensors(torch, big=True)
    # One metadata key: safetensors writes its metadata in hash order.
    sluice.save_file(want, tmp_path / "ours.safetensors", {"format": "pt"}, chunk_mib=1)
    st.save_file(want, str(tmp_path / "theirs.safetensors"), metadata={"format": "pt"})
    assert (tmp_path / "ours.safetensors").read_bytes() == (tmp_path / "theirs.safetensors").read_bytes()
    loaded = st.load_file(str(tmp_path / "ours.safetensors"))
    assert set(loaded) == set(want)
    for name, t in want.items():
        assert loaded[name].dtype == t.dtype and _raw(torch, loaded[name]) == _raw(torch, t), name


def test_bad_input_is_refused_before_the_target_changes(tmp_path):
    torch = torch_or_skip()
    path = tmp_path / "kept.safetensors"
    path.write_bytes(b"the previous checkpoint")
    base = torch.arange(12, dtype=torch.float32)
    cases = [
        ({"a": [1.0, 2.0]}, None, "'a' is a list"),
        ({"a": base, "b": base[4:8]}, None, "share memory"),
        ({"a": base.reshape(3, 4).t()}, None, "not contiguous"),
        ({"a": torch.ones(2, dtype=torch.complex128)}, None, "complex128"),
        ({"a": base}, {"step": 12}, "metadata"),
        ({"a": base}, ["step"], "metadata"),
        ({1: base}, None, "names must be str"),
        ({"__metadata__": base}, None, "__metadata__"),
        ([base], None, "dict"),
    ]
    for tensors, metadata, match in cases:
        with pytest.raises(ValueError, match=match):
            sluice.save_file(tensors, path, metadata)
        assert path.read_bytes() == b"the previous checkpoint"
        assert _leftovers(tmp_path, {"kept.safetensors"}) == []
    with pytest.raises(ValueError, match="chunk_mib"):
        sluice.save_file({"a": base}, path, chunk_mib=0)
    # Disjoint slices of one tensor are not shared memory (safetensors takes them too).
    sluice.save_file({"a": base[:4], "b": base[4:]}, path)
    _check_file(torch, path, {"a": base[:4], "b": base[4:]})


def _failing_sink(after):
    """A file sink whose writes fail once `after` pieces have been written (the header is one)."""
    class FailingSink(sluice._sluice._FileSink):
        def write(self, offset, *data):
            FailingSink.calls += 1
            if FailingSink.calls > after:
                raise sluice.IoError(f"disk full at offset {offset}")
            super().write(offset, *data)
    FailingSink.calls = 0
    return FailingSink


def test_a_save_that_fails_midway_leaves_the_old_file_and_says_how_far_it_got(tmp_path, monkeypatch):
    torch = torch_or_skip()
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"the previous checkpoint")
    monkeypatch.setattr(sluice._sluice, "_FileSink", _failing_sink(after=2))
    want = {"big": torch.randn(6 * MiB // 4), "more": torch.randn(6 * MiB // 4)}
    with pytest.raises(sluice.IoError, match=r"m\.safetensors.*after \d+ of \d+ bytes.*disk full") as caught:
        sluice.save_file(want, path, threads=1)
    assert "as it was" in str(caught.value)
    assert path.read_bytes() == b"the previous checkpoint"
    assert _leftovers(tmp_path, {"m.safetensors"}) == []


def test_a_conjugate_view_is_saved_with_its_values(tmp_path):
    # t.conj() is contiguous, but its memory holds the values unconjugated.
    torch = torch_or_skip()
    a = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    for background in (False, True):
        out = sluice.save_file({"c": a.conj(), "n": torch.tensor([1.0, -2.0])._neg_view()}, tmp_path / "c.safetensors",
                               background=background)
        if background:
            out.wait()
        got = sluice.load_file(tmp_path / "c.safetensors", _host_executor=HOST)
        assert got["c"].tolist() == [1 - 2j, 3 + 4j]
        assert got["n"].tolist() == [-1.0, 2.0]


def test_a_background_save_writes_the_tensors_as_they_were_at_the_call(tmp_path):
    torch = torch_or_skip()
    want = _tensors(torch, big=True)
    want["param"] = torch.nn.Parameter(torch.randn(3, 2))
    before = {name: t.detach().clone() for name, t in want.items()}
    handle = sluice.save_file(want, tmp_path / "b.safetensors", {"k": "v"}, background=True, chunk_mib=1)
    with torch.no_grad():
        for t in want.values():  # training goes on and changes the weights at once
            if t.numel():
                t.reshape(-1).view(torch.uint8).fill_(0x5A)
    assert handle.wait() is True
    assert handle.done()
    _check_file(torch, tmp_path / "b.safetensors", before, {"k": "v"})


def test_a_background_save_that_fails_raises_from_wait(tmp_path, monkeypatch):
    torch = torch_or_skip()
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"the previous checkpoint")
    monkeypatch.setattr(sluice._sluice, "_FileSink", _failing_sink(after=1))
    handle = sluice.save_file({"a": torch.ones(1000)}, path, background=True)
    with pytest.raises(sluice.IoError, match=r"m\.safetensors.*disk full"):
        handle.wait()
    assert handle.done()
    assert path.read_bytes() == b"the previous checkpoint"
    assert _leftovers(tmp_path, {"m.safetensors"}) == []


def test_a_failed_background_save_lets_go_of_its_copies_at_once(tmp_path, monkeypatch):
    # The error a failed save keeps for wait() must not keep the save's copies of the tensors (on
    # a GPU: the model's size in device memory) through its traceback's frames, for as long as the
    # error lives or until a garbage collection (in a DataLoader worker forked meanwhile, that
    # collection frees CUDA memory in a process that cannot touch the device).
    torch = torch_or_skip()
    monkeypatch.setattr(sluice._sluice, "_FileSink", _failing_sink(after=1))
    copies = []
    snapshot = sluice.checkpoint_save._snapshot

    def watched(torch, entries):
        out = snapshot(torch, entries)
        copies.extend(weakref.ref(t) for _, t, _, _ in out[0])
        return out

    monkeypatch.setattr(sluice.checkpoint_save, "_snapshot", watched)
    gc.disable()
    try:
        handle = sluice.save_file({"a": torch.ones(1000), "b": torch.zeros(10)}, tmp_path / "m.safetensors",
                                  background=True)
        with pytest.raises(sluice.IoError, match="disk full") as raised:
            handle.wait()
        assert raised.value.__traceback__ is not None  # the error still says where it failed
        assert len(copies) == 2 and [c() for c in copies] == [None, None]
    finally:
        gc.enable()


def test_a_failed_background_save_whose_handle_is_dropped_says_so(tmp_path, monkeypatch, capfd):
    torch = torch_or_skip()
    path = tmp_path / "m.safetensors"
    monkeypatch.setattr(sluice._sluice, "_FileSink", _failing_sink(after=1))
    handle = sluice.save_file({"a": torch.ones(1000)}, path, background=True)
    while not handle.done():
        time.sleep(0.01)
    del handle  # its error never retrieved
    gc.collect()
    err = capfd.readouterr().err
    assert str(path) in err and "disk full" in err and "no wait()" in err, err
    # Retrieved with wait(), it is the caller's to tell: nothing more is said, then or at collection.
    handle = sluice.save_file({"a": torch.ones(1000)}, path, background=True)
    with pytest.raises(sluice.IoError, match="disk full"):
        handle.wait()
    del handle
    gc.collect()
    assert capfd.readouterr().err == ""


# The tensors the scripts below save, and the parent checks.
_EXIT_TENSORS = """
def tensors():
    return {"a": torch.arange(1 << 20, dtype=torch.float32) * 0.5, "b": torch.arange(3 << 20, dtype=torch.int32),
            "c": torch.ones(5, dtype=torch.float16)}
"""

# A script for the interpreter the tests run on (the one sluice is installed for), whose saves
# write through a sink that sleeps before each write (and fails those after the header, when
# asked): its background save is still in flight when the script ends.
_SLOW_SAVE_SCRIPT = """
import sys, time
import torch
import sluice
""" + _EXIT_TENSORS + """
FAIL = sys.argv[2] == "fail"

class SlowSink(sluice._sluice._FileSink):
    def write(self, offset, *data):
        time.sleep(0.3)
        if FAIL and offset > 0:
            raise OSError(28, "No space left on device (injected)")
        super().write(offset, *data)

sluice.checkpoint_save._sluice._FileSink = SlowSink
if sys.argv[3] == "keep":
    handle = sluice.save_file(tensors(), sys.argv[1], {"k": "v"}, background=True)  # never waited for
else:
    sluice.save_file(tensors(), sys.argv[1], {"k": "v"}, background=True)
"""


def _run_slow_save(path, fail, keep):
    return subprocess.run([sys.executable, "-c", _SLOW_SAVE_SCRIPT, str(path), "fail" if fail else "write",
                           "keep" if keep else "drop"], capture_output=True, text=True, timeout=300)


def test_a_background_save_in_flight_when_the_script_ends_is_finished(tmp_path):
    # Before: interpreter shutdown stopped concurrent.futures first, the save's writes were refused,
    # and the script exited 0 with no file and nothing said.
    torch = torch_or_skip()
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"the previous checkpoint")
    run = _run_slow_save(path, fail=False, keep=False)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert path.read_bytes() != b"the previous checkpoint", "the save in flight at exit was lost"
    scope = {"torch": torch}
    exec(_EXIT_TENSORS, scope)
    _check_file(torch, path, scope["tensors"](), {"k": "v"})
    assert _leftovers(tmp_path, {"m.safetensors"}) == []


@pytest.mark.parametrize("keep", [False, True], ids=["handle-dropped", "handle-kept"])
def test_a_background_save_that_fails_unseen_says_so_before_the_process_exits(tmp_path, keep):
    torch_or_skip()
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"the previous checkpoint")
    run = _run_slow_save(path, fail=True, keep=keep)
    said = [line for line in run.stderr.splitlines() if str(path) in line]
    assert len(said) == 1, run.stderr
    assert "background save" in said[0] and "No space left on device (injected)" in said[0], run.stderr
    assert path.read_bytes() == b"the previous checkpoint"
    assert _leftovers(tmp_path, {"m.safetensors"}) == []


_STUCK_SAVE_SCRIPT = """
import sys, time
import torch
import sluice

class StuckSink(sluice._sluice._FileSink):
    def write(self, offset, *data):
        super().write(offset, *data)
        print("writing", flush=True)
        time.sleep(600)  # until killed

sluice.checkpoint_save._sluice._FileSink = StuckSink
sluice.save_file({"a": torch.arange(1 << 20, dtype=torch.float32)}, sys.argv[1])
"""


def test_the_next_save_removes_the_new_file_a_killed_save_left_but_not_a_live_ones(tmp_path):
    torch = torch_or_skip()
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"the previous checkpoint")

    def partials():
        return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("m.safetensors.sluice-partial-"))

    child = subprocess.Popen([sys.executable, "-c", _STUCK_SAVE_SCRIPT, str(path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "writing\n", child.stderr.read()
        # Named for its target and not hidden, so that whoever finds it knows what it is.
        assert _leftovers(tmp_path, {"m.safetensors"}) == partials() and len(partials()) == 1
        theirs = partials()
        want = {"w": torch.arange(100, dtype=torch.float32)}
        sluice.save_file(want, path)  # while the other save lives: its file stays
        _check_file(torch, path, want)
        assert partials() == theirs
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
        assert partials() == theirs, "the killed save left no new file"
        sluice.save_file(want, path)
        _check_file(torch, path, want)
        assert _leftovers(tmp_path, {"m.safetensors"}) == []
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()


@gpu
def test_cuda_tensors_are_saved_bitwise_in_several_chunks(tmp_path):
    torch = torch_or_skip()
    want = _tensors(torch, big=True)
    on_gpu = {name: t.cuda() if i % 3 else t for i, (name, t) in enumerate(want.items())}  # some stay on the host
    on_gpu["large"] = torch.randn(3 * MiB + 7, device="cuda")
    on_gpu["large"].mul_(3)  # queued on torch's current stream, not synchronized: the save waits for it
    path = tmp_path / "g.safetensors"
    sluice.save_file(on_gpu, path, {"k": "v"}, chunk_mib=1, staging=2, threads=3)
    _check_file(torch, path, {name: t.cpu() for name, t in on_gpu.items()}, {"k": "v"})
    got = sluice.load_file(path, chunk_mib=1)
    for name, t in on_gpu.items():
        assert got[name].is_cuda and got[name].dtype == t.dtype and _raw(torch, got[name]) == _raw(torch, t), name
    st = pytest.importorskip("safetensors.torch", reason="the safetensors package is not installed")
    st.save_file(on_gpu, str(tmp_path / "theirs.safetensors"), metadata={"k": "v"})
    assert path.read_bytes() == (tmp_path / "theirs.safetensors").read_bytes()


@gpu
def test_a_background_save_of_cuda_tensors_keeps_its_snapshot_while_training_changes_them(tmp_path):
    torch = torch_or_skip()
    g = torch.Generator(device="cuda").manual_seed(3)
    weights = {f"layer{i}.weight": torch.randn(2 * MiB + i, generator=g, device="cuda") for i in range(4)}
    weights["ids"] = torch.arange(1000, device="cuda")
    for w in weights.values():
        w.add_(1)  # queued, not synchronized: the snapshot must see it
    expect = {name: w.clone() for name, w in weights.items()}
    handle = sluice.save_file(weights, tmp_path / "s.safetensors", background=True, chunk_mib=1)
    for _ in range(20):  # in-place changes on the current stream right after the call
        for w in weights.values():
            if w.is_floating_point():
                w.mul_(2)
            else:
                w.add_(7)
    handle.wait()
    torch.cuda.synchronize()
    got = sluice.load_file(tmp_path / "s.safetensors")
    for name, w in expect.items():
        assert torch.equal(got[name], w), name
    assert not torch.equal(got["layer0.weight"], weights["layer0.weight"])
    _, by_hand, _ = _read_by_hand(torch, tmp_path / "s.safetensors")
    assert by_hand["ids"][2] == _raw(torch, expect["ids"])


def test_the_device_bytes_go_through_the_ring_to_the_host_each_byte_once_where_it_belongs(tmp_path):
    # A save's CUDA tensors go through sluice's ring to the host (_DeviceWrites). On device -1 the
    # ring runs on the host executor, over host memory, checking every edge: the path a GPU takes,
    # without one. Tensors lie in the file with gaps between them (a header, CPU tensors' bytes),
    # written apart, as save_file writes them.
    torch = torch_or_skip()
    g = torch.Generator().manual_seed(5)
    sizes = [5, 4096, 1, 3 * 1000 + 1, 0, 2048]
    tensors, rows, at = [], [], 100
    for n in sizes:
        t = torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8)
        tensors.append((t, at))
        rows.append((t.data_ptr(), n, at))
        at += n + 3
    for chunk_bytes, staging, threads in ((1, 2, 1), (7, 3, 2), (1000, 2, 4), (1 << 20, 3, 4)):
        path = tmp_path / f"ring{chunk_bytes}.bin"
        sink = sluice._sluice._FileSink(str(path), at)
        sink.begin()
        sink.write(0, b"h" * 100)
        for t, begin in tensors:
            sink.write(begin + t.numel(), b"c" * 3)
        writes = sluice._sluice._DeviceWrites()
        writes.run(sink, -1, 0, rows, chunk_bytes, staging, threads)
        sink.commit()
        assert writes.written == sum(sizes)
        data = path.read_bytes()
        for t, begin in tensors:
            assert data[begin:begin + t.numel()] == bytes(t.tolist()), (chunk_bytes, begin)
            assert data[begin + t.numel():begin + t.numel() + 3] == b"ccc"  # the gaps as written apart
        assert data[:100] == b"h" * 100


def test_a_write_that_fails_on_the_ring_to_the_host_is_the_sinks_own_error(tmp_path):
    torch = torch_or_skip()
    t = torch.arange(64, dtype=torch.uint8)
    sink = sluice._sluice._FileSink(str(tmp_path / "short.bin"), 32)  # the file holds 32 bytes: 64 do not fit
    sink.begin()
    writes = sluice._sluice._DeviceWrites()
    with pytest.raises(ValueError, match="write of items 32..48 from 16 bytes, for a file of 32 items"):
        writes.run(sink, -1, 0, [(t.data_ptr(), 64, 0)], 16, 2, 1)
    sink.abandon()
    assert writes.written == 32  # the two chunks before the failed one, drained in order
    assert not (tmp_path / "short.bin").exists()