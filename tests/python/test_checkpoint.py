"""sluice.load_file: safetensors checkpoints through the staging ring. The file is written here
from the format's description (8-byte little-endian header size, JSON header, the tensors' bytes),
so that the tests need no safetensors package; where it is installed, its reader and writer are
checked against ours too. Most tests read into host memory on the host ring executor, so that
they run where there is no GPU; the last ones run on the GPU."""
import json
import struct

import pytest

import sluice
from conftest import gpu, torch_or_skip
from safetensors_cases import format_name
from safetensors_cases import raw_bytes as _raw_bytes
from safetensors_cases import sample_tensors as _tensors

HOST = {"jitter_us": 30}

def _write(path, torch, tensors, metadata=None, pad_to=8, header=None):
    """A safetensors file of `tensors` in dict order; `header` replaces the computed JSON."""
    entries, blobs, at = {}, [], 0
    for name, t in tensors.items():
        data = _raw_bytes(torch, t.cpu())
        entries[name] = {"dtype": format_name(t), "shape": list(t.shape),
                         "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    if metadata:
        entries["__metadata__"] = metadata
    text = json.dumps(entries if header is None else header).encode()
    text += b" " * (-(8 + len(text)) % pad_to)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def _check_same(torch, got, want):
    assert list(got) == list(want)  # in file order, as safetensors' load_file gives them
    for name, t in want.items():
        g, t = got[name].cpu(), t.cpu()
        assert g.dtype == t.dtype and g.shape == t.shape, name
        assert _raw_bytes(torch, g) == _raw_bytes(torch, t), name


def test_every_dtype_and_shape_comes_back_as_stored(tmp_path):
    torch = torch_or_skip()
    want = _tensors(torch, big=True)
    _write(tmp_path / "m.safetensors", torch, want, metadata={"format": "pt"})
    report = {}
    got = sluice.load_file(tmp_path / "m.safetensors", _host_executor=HOST, chunk_mib=1, threads=3, _report=report)
    _check_same(torch, got, want)
    # The report's lanes account for every byte and every chunk.
    assert sum(lane["bytes"] for lane in report["lanes"]) == report["bytes"] == sum(t.numel() * t.element_size() for t in want.values())
    assert sum(lane["chunks"] for lane in report["lanes"]) == report["chunks"]
    # The setup's parts lie within it; each lane that read began after the read's start and before its end.
    assert 0 < report["header_seconds"] and 0 < report["tensors_seconds"]
    assert report["header_seconds"] + report["tensors_seconds"] <= report["setup_seconds"]
    for lane in report["lanes"]:
        assert 0 < lane["ring_made_seconds"] <= lane["finished_seconds"]
        assert lane["ring_made_seconds"] < lane["started_seconds"] <= lane["finished_seconds"] if lane["chunks"] else lane["started_seconds"] == 0
    # Each tensor has memory of its own (as safetensors' loader gives), not a view of one block.
    assert len({t.data_ptr() for t in got.values() if t.numel()}) == sum(1 for t in want.values() if t.numel())
    header = sluice.read_header(tmp_path / "m.safetensors")
    assert header["metadata"] == {"format": "pt"}
    assert [e[0] for e in header["tensors"]] == list(want)


def test_without_chunk_mib_the_file_is_read_in_the_readers_4_mib_chunks(tmp_path):
    torch = torch_or_skip()
    # 9 MiB of data after a header: chunks are cut from the page the data begins in, so the header's
    # bytes in that page make it 3 chunks of 4 MiB and 10 of 1.
    want = {"w": torch.arange(9 << 18, dtype=torch.float32)}
    _write(tmp_path / "m.safetensors", torch, want)
    chunks = {}
    for chunk_mib in (None, 4, 1):
        report = {}
        got = sluice.load_file(tmp_path / "m.safetensors", _host_executor=HOST, chunk_mib=chunk_mib, _report=report)
        _check_same(torch, got, want)
        chunks[chunk_mib] = report["chunks"]
    assert chunks == {None: 3, 4: 3, 1: 10}


def test_a_header_padded_to_any_length_and_a_file_of_no_tensors(tmp_path):
    torch = torch_or_skip()
    want = _tensors(torch)
    _write(tmp_path / "p.safetensors", torch, want, pad_to=4096)
    _check_same(torch, sluice.load_file(tmp_path / "p.safetensors", _host_executor=HOST), want)
    _write(tmp_path / "e.safetensors", torch, {})
    assert sluice.load_file(tmp_path / "e.safetensors", _host_executor=HOST) == {}


def _refused(tmp_path, torch, monkeypatch, mutate, match):
    """The load refuses the file before a tensor is made (no device memory is taken)."""
    path = tmp_path / "bad.safetensors"
    mutate(path)
    made = []
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: made.append(a) or real_empty(*a, **k))
    with pytest.raises(ValueError, match=match):
        sluice.load_file(path, _host_executor=HOST)
    assert made == []


def test_bad_files_are_refused_before_any_memory_is_taken(tmp_path, monkeypatch):
    torch = torch_or_skip()
    good = {"a": torch.ones(4), "b": torch.ones(2)}

    def truncated(path):
        _write(path, torch, good)
        data = path.read_bytes()
        path.write_bytes(data[:-3])

    def overlapping(path):
        _write(path, torch, good, header={"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                          "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})

    def past_end(path):
        _write(path, torch, good, header={"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                          "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 32]}})

    def unknown_dtype(path):
        _write(path, torch, good, header={"a": {"dtype": "F12", "shape": [4], "data_offsets": [0, 16]},
                                          "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}})

    def huge_header(path):
        path.write_bytes(struct.pack("<Q", 200_000_000) + b"{}")

    def wrong_size(path):
        _write(path, torch, good, header={"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]},
                                          "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}})

    _refused(tmp_path, torch, monkeypatch, truncated, "bad.safetensors")
    _refused(tmp_path, torch, monkeypatch, overlapping, "'b'")
    _refused(tmp_path, torch, monkeypatch, past_end, "bad.safetensors")
    _refused(tmp_path, torch, monkeypatch, unknown_dtype, "F12")
    _refused(tmp_path, torch, monkeypatch, huge_header, "header")
    _refused(tmp_path, torch, monkeypatch, wrong_size, "'a'")


def test_a_missing_file_is_an_io_error_and_bad_options_are_refused(tmp_path):
    torch = torch_or_skip()
    with pytest.raises(sluice.IoError, match="missing.safetensors"):
        sluice.load_file(tmp_path / "missing.safetensors", _host_executor=HOST)
    _write(tmp_path / "m.safetensors", torch, {"a": torch.ones(2)})
    with pytest.raises(ValueError, match="chunk_mib"):
        sluice.load_file(tmp_path / "m.safetensors", chunk_mib=0, _host_executor=HOST)
    with pytest.raises(ValueError, match="direct"):
        sluice.load_file(tmp_path / "m.safetensors", direct="yes", _host_executor=HOST)
    with pytest.raises(ValueError, match="CUDA device"):
        sluice.load_file(tmp_path / "m.safetensors", device="cpu")


def test_files_written_by_safetensors_load_as_its_reader_loads_them(tmp_path):
    torch = torch_or_skip()
    st = pytest.importorskip("safetensors.torch", reason="the safetensors package is not installed")
    want = _tensors(torch, big=True)
    st.save_file(want, str(tmp_path / "st.safetensors"), metadata={"k": "v"})
    _check_same(torch, sluice.load_file(tmp_path / "st.safetensors", _host_executor=HOST, chunk_mib=1),
                st.load_file(str(tmp_path / "st.safetensors")))
    _write(tmp_path / "ours.safetensors", torch, want)
    _check_same(torch, st.load_file(str(tmp_path / "ours.safetensors")), want)


@gpu
def test_on_the_gpu_every_tensor_equals_the_file_bitwise(tmp_path):
    torch = torch_or_skip()
    want = _tensors(torch, big=True)
    _write(tmp_path / "m.safetensors", torch, want)
    for direct in (False, True, "auto"):
        torch.cuda.synchronize()
        got = sluice.load_file(tmp_path / "m.safetensors", chunk_mib=1, direct=direct)
        assert all(t.is_cuda and t.device.index == torch.cuda.current_device() for t in got.values())
        # Used at once on the current stream, with no synchronization by the caller.
        copies = {name: t.clone() for name, t in got.items()}
        _check_same(torch, copies, want)
        _check_same(torch, got, want)


@gpu
def test_on_the_gpu_a_bad_file_takes_no_device_memory(tmp_path):
    torch = torch_or_skip()
    path = tmp_path / "bad.safetensors"
    _write(path, torch, {"a": torch.ones(1 << 20)})
    path.write_bytes(path.read_bytes()[:-1])
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with pytest.raises(ValueError):
        sluice.load_file(path)
    assert torch.cuda.memory_allocated() == before


@gpu
def test_on_the_gpu_it_matches_safetensors_load_file(tmp_path):
    torch = torch_or_skip()
    st = pytest.importorskip("safetensors.torch", reason="the safetensors package is not installed")
    want = _tensors(torch, big=True)
    st.save_file(want, str(tmp_path / "st.safetensors"))
    _check_same(torch, sluice.load_file(tmp_path / "st.safetensors"), st.load_file(str(tmp_path / "st.safetensors"), device="cuda"))


def test_the_readers_staging_wait_is_one_it_knows(tmp_path):
    # The bench compares the ways a lane waits for its staging slot's copy by name: a name it does
    # not know is refused before anything is read, not taken for the default.
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(8192))
    with pytest.raises(ValueError, match="staging_wait must be"):
        sluice._sluice._read_file_ranges(str(path), [], -1, staging_wait="spin")
