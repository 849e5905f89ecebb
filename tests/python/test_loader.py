"""TokenLoader: the file's tokens at the planned windows, resumable, ranks disjoint."""
import numpy as np
import pytest

import sluice
from conftest import gpu, torch_or_skip


def write_shard(path, tokens):
    header = np.zeros(256, np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(np.uint16).tobytes())


@pytest.fixture
def shards(tmp_path):
    data = []
    for s in range(3):
        tokens = (np.arange(5000 + 777 * s) * 7 + 1 + s * 100_003) % 65521
        write_shard(tmp_path / f"train_{s}.bin", tokens)
        data.append(tokens)
    return str(tmp_path / "train_*.bin"), data


def windows_of(data, seq):
    out = []
    for tokens in data:
        for k in range((len(tokens) - 1) // seq):
            out.append(tokens[k * seq:k * seq + seq + 1])
    return out


@gpu
def test_batches_are_the_files_tokens(shards):
    torch = torch_or_skip()
    pattern, data = shards
    windows = windows_of(data, 32)
    loader = sluice.TokenLoader(pattern, batch=8, seq=32)
    seen = 0
    for x, y in loader:
        assert x.is_cuda and x.dtype == torch.int32 and x.shape[1] == 32
        host_x, host_y = x.cpu().numpy(), y.cpu().numpy()
        for r in range(x.shape[0]):
            w = windows[seen + r]
            np.testing.assert_array_equal(host_x[r], w[:-1])
            np.testing.assert_array_equal(host_y[r], w[1:])
        seen += x.shape[0]
    assert seen == len(windows)
    assert len(loader) == (len(windows) + 7) // 8
    idle = loader.idle()
    assert idle["steps"] == len(loader) and 0 <= idle["idle_fraction"] <= 1


@gpu
def test_state_dict_resumes_the_same_batches(shards):
    torch = torch_or_skip()
    pattern, _ = shards
    first = sluice.TokenLoader(pattern, batch=4, seq=16, shuffle=True, seed=3)
    it = iter(first)
    for _ in range(10):
        next(it)
    state = first.state_dict()
    expected = [x.cpu().clone() for x, _ in (next(it) for _ in range(5))]
    resumed = sluice.TokenLoader(pattern, batch=4, seq=16, shuffle=True, seed=3, state=state)
    got = [x.cpu().clone() for x, _ in (b for b, _ in zip(resumed, range(5)))]
    for a, b in zip(expected, got):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="seed"):
        resumed.load_state_dict({**state, "seed": 4})


@gpu
def test_ranks_are_disjoint(shards):
    torch = torch_or_skip()
    pattern, data = shards
    firsts = []
    for rank in range(2):
        for x, _ in sluice.TokenLoader(pattern, batch=5, seq=20, shuffle=True, seed=9, rank=rank, world=2):
            firsts += x[:, 0].cpu().tolist()
    assert len(firsts) == len(set(firsts)) == len(windows_of(data, 20))


@gpu
def test_bad_shards_are_named(tmp_path):
    torch_or_skip()
    bad = tmp_path / "bad.bin"
    header = np.zeros(256, np.int32)
    header[0] = 123
    bad.write_bytes(header.tobytes())
    with pytest.raises(ValueError, match="bad.bin: wrong magic 123"):
        sluice.TokenLoader(str(bad), batch=1, seq=4)
