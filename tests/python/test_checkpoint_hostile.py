"""sluice.load_file and sluice.read_header on checkpoints made to hurt the reader (issue 48): a
header nested a million deep, and a file renamed over the path or written between the header's
read and the tensors' read. On the host executor: no GPU needed. Before the fixes, the nested
headers killed the interpreter (SIGSEGV: the refusal's message dumped the value recursively), and
the replaced file's bytes were loaded at the old file's offsets without a word."""
import json
import os
import struct

import pytest

import sluice
from conftest import torch_or_skip

HOST = {"jitter_us": 30}
DEPTH = 1_000_000


def _write(path, header, data=b""):
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def _nested_in(field):
    fields = {"dtype": b'"U8"', "shape": b"[1]", "data_offsets": b"[0,1]"}
    fields[field] = b"[" * DEPTH + b"]" * DEPTH
    return b'{"t":{' + b",".join(b'"%s":%s' % (k.encode(), v) for k, v in fields.items()) + b"}}"


@pytest.mark.parametrize("field", ["shape", "data_offsets"])
def test_a_header_nested_a_million_deep_is_a_value_error_naming_the_file(tmp_path, monkeypatch, field):
    path = tmp_path / f"deep-{field}.safetensors"
    _write(path, _nested_in(field), b"x")
    with pytest.raises(ValueError, match=f"deep-{field}.safetensors: tensor 't': {field} ") as refused:
        sluice.read_header(path)
    assert len(str(refused.value)) < 400  # a few characters of the value, not the value
    torch = torch_or_skip()
    made = []
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: made.append(a) or real_empty(*a, **k))
    with pytest.raises(ValueError, match=f"deep-{field}.safetensors"):
        sluice.load_file(path, _host_executor=HOST)
    assert made == []  # refused before a tensor was made


def _checkpoint(path, first):
    """A checkpoint of one F32 tensor of 4096 elements counting up from `first`: two of them have
    the same header and size, and other bytes."""
    _write(path, {"w": {"dtype": "F32", "shape": [4096], "data_offsets": [0, 4 * 4096]}},
           struct.pack("<4096f", *range(first, first + 4096)))


def _between_header_and_read(monkeypatch, change):
    """Runs `change` just before load_file's reads open the file, after its header was read."""
    real = sluice.checkpoint._sluice._read_checkpoint

    def read_after_change(*args, **kwargs):
        change()
        return real(*args, **kwargs)

    monkeypatch.setattr(sluice.checkpoint._sluice, "_read_checkpoint", read_after_change)


def test_a_file_renamed_over_the_path_between_header_and_read_is_an_io_error(tmp_path, monkeypatch):
    torch = torch_or_skip()
    path, beside = tmp_path / "m.safetensors", tmp_path / "new.safetensors"
    _checkpoint(path, 0)
    _checkpoint(beside, 10_000)  # a concurrent save, as savers write: beside the path, then renamed over it
    _between_header_and_read(monkeypatch, lambda: os.replace(beside, path))
    with pytest.raises(sluice.IoError, match="m.safetensors: was replaced or changed after its header was read"):
        sluice.load_file(path, _host_executor=HOST)
    monkeypatch.undo()
    # Read again, the new file loads whole.
    got = sluice.load_file(path, _host_executor=HOST)
    assert torch.equal(got["w"], torch.arange(10_000, 10_000 + 4096, dtype=torch.float32))


def test_a_file_written_in_place_between_header_and_read_is_an_io_error(tmp_path, monkeypatch):
    torch_or_skip()
    path = tmp_path / "m.safetensors"
    _checkpoint(path, 0)
    os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))

    def write_in_place():
        with open(path, "r+b") as f:
            f.seek(-4, os.SEEK_END)
            f.write(struct.pack("<f", -1.0))
        os.utime(path, ns=(1_000_000_007_000_000_000, 1_000_000_007_000_000_000))

    _between_header_and_read(monkeypatch, write_in_place)
    with pytest.raises(sluice.IoError, match="m.safetensors: was replaced or changed .* modification time"):
        sluice.load_file(path, _host_executor=HOST)


def test_read_header_says_which_file_it_read(tmp_path):
    path = tmp_path / "m.safetensors"
    _checkpoint(path, 0)
    st = os.stat(path)
    assert sluice.read_header(path)["file"] == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
