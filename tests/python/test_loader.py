"""TokenLoader: the file's tokens at the planned windows, resumable on any number of ranks,
equal batch counts, and its state checked before any work."""
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


def take(loader, n):
    """The inputs of the next n batches, on the host; fewer if the epoch ends first."""
    out = []
    for x, _ in loader:
        out.append(x.cpu().clone())
        if len(out) == n:
            break
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
    take(first, 10)
    state = first.state_dict()
    expected = take(first, 5)
    resumed = sluice.TokenLoader(pattern, batch=4, seq=16, shuffle=True, seed=3, state=state)
    got = take(resumed, 5)
    assert len(expected) == len(got) == 5  # a resumed loader that yields nothing must fail here
    for a, b in zip(expected, got):
        assert torch.equal(a, b)
    first.load_state_dict(state)  # the same, in place
    again = take(first, 5)
    assert len(again) == 5 and all(torch.equal(a, b) for a, b in zip(expected, again))


@gpu
def test_a_state_saved_on_four_ranks_resumes_on_two_and_three(shards):
    # Loaders for every rank in one process: the global batches after the state, each rank's
    # rows in rank order, are the uninterrupted job's.
    torch = torch_or_skip()
    pattern, _ = shards

    def job(world, batch, state=None, steps=12):
        loaders = [sluice.TokenLoader(pattern, batch=batch, seq=16, shuffle=True, seed=7, rank=r, world=world,
                                      state=state) for r in range(world)]
        per_rank = [take(loader, steps) for loader in loaders]
        assert all(len(batches) == steps for batches in per_rank)
        return [torch.cat([per_rank[r][s] for r in range(world)]) for s in range(steps)], loaders[0].state_dict()

    _, saved = job(4, 6, steps=10)
    straight, _ = job(4, 6, state=saved)
    for world, batch in [(2, 12), (3, 8)]:
        resumed, _ = job(world, batch, state=saved)
        for s, (a, b) in enumerate(zip(straight, resumed)):
            assert torch.equal(a, b), f"{world} ranks, batch {s} after the state"


@gpu
def test_every_rank_serves_the_same_number_of_batches(shards):
    torch_or_skip()
    pattern, data = shards
    windows = len(windows_of(data, 20))
    counts = [len(sluice.TokenLoader(pattern, batch=5, seq=20, rank=r, world=3)) for r in range(3)]
    assert counts == [-(-windows // 15)] * 3  # the tail padded to a whole global batch
    firsts = set()
    for rank in range(3):
        for x, _ in sluice.TokenLoader(pattern, batch=5, seq=20, shuffle=True, seed=9, rank=rank, world=3,
                                       drop_last=True):
            firsts |= set(x[:, 0].cpu().tolist())
    assert len(firsts) == windows // 15 * 15  # dropped: disjoint, every whole global batch


def test_a_state_from_another_order_or_other_data_is_refused_before_any_work(shards):
    pattern, _ = shards
    state = {"epoch": 0, "sample": 40, "global_batch": 4, "windows": 1082, "seed": 3, "shuffle": True}
    with pytest.raises(ValueError, match="saved with seed=3, this loader has seed=4"):
        sluice.TokenLoader(pattern, batch=4, seq=16, shuffle=True, seed=4, state=state)
    with pytest.raises(ValueError, match="saved with shuffle=True, this loader has shuffle=False"):
        sluice.TokenLoader(pattern, batch=4, seq=16, seed=3, state=state)
    with pytest.raises(ValueError, match="these shards hold 1082: it belongs to other data"):
        sluice.TokenLoader(pattern, batch=4, seq=16, shuffle=True, seed=3, state={**state, "windows": 5})
    with pytest.raises(ValueError, match="not a loader state: it has no sample"):
        sluice.TokenLoader(pattern, batch=4, seq=16, state={"epoch": 0, "batch": 3})


def test_a_batch_larger_than_the_data_is_refused_before_any_work(shards):
    pattern, data = shards
    windows = len(windows_of(data, 1000))
    assert windows == 15
    with pytest.raises(ValueError, match="a global batch of 16 rows x 1 rank is larger than the 15 items"):
        sluice.TokenLoader(pattern, batch=16, seq=1000)
    with pytest.raises(ValueError, match="a global batch of 4 rows x 4 ranks is larger than the 15 items"):
        sluice.TokenLoader(pattern, batch=4, seq=1000, rank=0, world=4)


def test_bad_shards_are_named(tmp_path):
    bad = tmp_path / "bad.bin"
    header = np.zeros(256, np.int32)
    header[0] = 123
    bad.write_bytes(header.tobytes())
    with pytest.raises(ValueError, match="bad.bin: wrong magic 123"):
        sluice.TokenLoader(str(bad), batch=1, seq=4)
