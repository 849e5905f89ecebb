"""Training batches for examples/train_gpt.py, three ways, all in the same sample order:

  sluice     sluice.TokenLoader: batches on the GPU before the step asks for them
  torch      a torch DataLoader over memory-mapped shards (workers, pin_memory,
             .to(device, non_blocking=True)), with sluice.BatchPlan as its batch
             sampler, so it reads the same windows in the same order
  resident   the same batches, put on the device before the loop: loading for free

Each is an endless iterator of (inputs, targets) on the device, with
state_dict() (where the job is in its data: resumable on any number of ranks),
and plan_state() (the state of the next batch it serves).
"""
import glob

import numpy as np
import torch

import sluice

SHARD_HEADER_INTS = 256


def open_shards(pattern):
    """[(memmap of the tokens, token width)] of the shards the pattern names, in sluice's order."""
    shards = []
    for path in sorted(glob.glob(pattern)):
        magic, version, count = np.fromfile(path, dtype=np.int32, count=3)
        dtype = {20240520: np.int16, 20240801: np.int32}.get(int(magic))  # the same bytes, as torch can hold them
        if dtype is None:
            raise ValueError(f"{path}: not a token shard (magic {magic})")
        shards.append(np.memmap(path, dtype=dtype, mode="r", offset=4 * SHARD_HEADER_INTS, shape=(int(count),)))
    if not shards:
        raise ValueError(f"no file matches {pattern}")
    return shards


def write_shards(directory, tokens, vocab, shards=4, phrase=8, seed=0):
    """Shards of uint16 tokens that a model can learn: random phrases of `phrase` tokens from a fixed set."""
    import pathlib
    rng = np.random.default_rng(seed)
    phrases = rng.integers(0, vocab, size=(max(4, vocab // 2), phrase), dtype=np.uint16)
    pathlib.Path(directory).mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        stream = phrases[rng.integers(0, len(phrases), size=tokens // shards // phrase)].reshape(-1)
        header = np.zeros(SHARD_HEADER_INTS, np.int32)
        header[:3] = (20240520, 1, len(stream))
        with open(pathlib.Path(directory) / f"train_{s:02d}.bin", "wb") as f:
            f.write(header.tobytes())
            f.write(stream.tobytes())
    return str(pathlib.Path(directory) / "train_*.bin")


class Windows(torch.utils.data.Dataset):
    """Window k of a shard is its tokens [k seq, k seq + seq + 1), as sluice's TokenLoader cuts them."""

    def __init__(self, pattern, seq):
        self.shards, self.seq = open_shards(pattern), seq
        self.starts = np.cumsum([0] + [(len(s) - 1) // seq for s in self.shards])

    def __len__(self):
        return int(self.starts[-1])

    def __getitem__(self, i):
        k = int(np.searchsorted(self.starts, i, side="right")) - 1
        first = (i - int(self.starts[k])) * self.seq
        return torch.from_numpy(np.array(self.shards[k][first:first + self.seq + 1]))


def widen(windows):
    """int16/int32 windows on the device -> int32 inputs and targets (uint16 tokens back from int16)."""
    w = windows.int() & 0xFFFF if windows.dtype == torch.int16 else windows
    return w[:, :-1], w[:, 1:]


class SluiceBatches:
    def __init__(self, pattern, batch, seq, seed, device, state=None, threads=0):
        # threads: the loader's reader threads (0: one per hardware thread).
        self.loader = sluice.TokenLoader(pattern, batch=batch, seq=seq, shuffle=True, seed=seed,
                                         device=device.index, state=state, threads=threads)
        # The loader's order, for --log-samples: the loader itself says where it is, not which windows.
        self.plan = sluice.BatchPlan(self.loader.state_dict()["windows"], batch=batch, shuffle=True, seed=seed)

    def __iter__(self):
        while True:
            yield from self.loader

    def state_dict(self):
        return self.loader.state_dict()

    def plan_state(self):
        return self.loader.state_dict()

    def idle(self):
        return self.loader.idle()["idle_fraction"]


class _TorchOrder:
    """Where a source that follows the torch order stands: its state, as the loaders save it."""

    def state_dict(self):
        return {**self.state, "global_batch": self.plan.global_batch, "windows": len(self.windows)}

    def plan_state(self):
        return self.state

    def idle(self):
        return None


class TorchBatches(_TorchOrder):
    def __init__(self, pattern, batch, seq, seed, device, state=None, workers=4):
        self.windows = Windows(pattern, seq)
        self.plan = sluice.BatchPlan(len(self.windows), batch=batch, shuffle=True, seed=seed)
        self.device, self.workers = device, workers
        self.state = self.plan.start(state)

    def _epoch(self):
        """The DataLoader for what is left of the current epoch, as lists of window indices."""
        sampler = [items for _, items in self.plan.epoch(self.state)]
        return torch.utils.data.DataLoader(self.windows, batch_sampler=sampler, num_workers=self.workers,
                                           pin_memory=self.device.type == "cuda",
                                           persistent_workers=False)

    def __iter__(self):
        while True:
            for windows in self._epoch():
                x, y = widen(windows.to(self.device, non_blocking=True))
                self.state = self.plan.next(self.state)
                yield x, y


class ResidentBatches(_TorchOrder):
    """The first `steps` batches of the torch order, on the device before the loop."""

    def __init__(self, pattern, batch, seq, seed, device, state=None, steps=0):
        source = TorchBatches(pattern, batch, seq, seed, device, state, workers=0)
        self.plan, self.windows = source.plan, source.windows
        self.batches = []
        batches = iter(source)
        for _ in range(steps):
            at = source.state
            x, y = next(batches)
            self.batches.append((at, x.clone(), y.clone()))
        self.state = self.batches[0][0] if self.batches else source.state

    def __iter__(self):
        for at, x, y in self.batches:
            self.state = self.plan.next(at)
            yield x, y
        raise RuntimeError("the resident batches are used up")
