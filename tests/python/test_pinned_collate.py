"""sluice.PinnedCollate: a DataLoader's workers collate into slots of memory shared with this process.
The batches equal default_collate's, slots are reused only once a batch and every tensor of it are
gone, and what the slots cannot hold is made by default_collate."""
import collections
import os

import pytest

import sluice
from conftest import gpu, torch_or_skip

HOST = {"jitter_us": 30, "seed": 3}
Pair = collections.namedtuple("Pair", "left right")


class Samples:
    """Samples of every kind default_collate stacks, each saying which sample it is."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import numpy as np
        torch = torch_or_skip()
        return {"image": torch.full((3, 4, 5), float(i)), "ids": np.arange(6, dtype=np.int32) + i,
                "label": i, "weight": i / 2, "flag": i % 2 == 0, "name": f"s{i}",
                "pair": Pair(torch.tensor([i, -i], dtype=torch.bfloat16), (torch.tensor(i), [i * 3]))}


def _same(got, want):
    torch = torch_or_skip()
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert got == want


def _loader(n=40, batch=8, workers=2, slots=4, dataset=None):
    torch = torch_or_skip()
    from torch.utils.data import DataLoader
    return DataLoader(dataset or Samples(n), batch_size=batch, num_workers=workers,
                      collate_fn=sluice.PinnedCollate(slots=slots))


def _reference(n=40, batch=8):
    torch = torch_or_skip()
    data = Samples(n)
    return [torch.utils.data.default_collate([data[i] for i in range(b, min(b + batch, n))]) for b in range(0, n, batch)]


def test_each_batch_lies_in_a_slot_and_equals_what_default_collate_makes():
    got = list(_loader())
    assert all(isinstance(b, sluice.SlotBatch) for b in got)
    for batch, want in zip(got, _reference(), strict=True):
        _same(batch.tensors(), want)


def test_through_the_prefetcher_every_batch_equals_default_collates():
    torch = torch_or_skip()
    seen = 0
    for batch, want in zip(sluice.Prefetcher(_loader(), _host_executor=HOST), _reference(), strict=True):
        _same(batch, want)
        seen += 1
    assert seen == 5


def test_a_slot_is_reused_only_once_every_tensor_of_its_batch_is_gone():
    """One worker, one slot: while a view of the first batch lives, every later batch is made by
    default_collate, and the view keeps its bytes; once it goes, batches come in the slot again."""
    torch = torch_or_skip()
    it = iter(_loader(n=64, batch=8, workers=1, slots=1))
    first = next(it)
    assert isinstance(first, sluice.SlotBatch)
    kept = first.tensors()["image"][2:5]  # a view: the batch object and its other tensors go
    del first
    later = [next(it) for _ in range(3)]
    assert not any(isinstance(b, sluice.SlotBatch) for b in later), "a slot still read was written"
    assert torch.equal(kept, torch.stack([torch.full((3, 4, 5), float(i)) for i in (2, 3, 4)]))
    del kept, later
    # The worker has been handed batches 4 and 5, and may have made them while the slot was busy;
    # the first it makes once the slot is free (batch 6 at the latest) comes in the slot.
    in_slot = []
    for batch, want in zip(it, _reference(64, 8)[4:], strict=True):
        in_slot.append(isinstance(batch, sluice.SlotBatch))
        _same(batch.tensors() if in_slot[-1] else batch, want)
        del batch
    assert any(in_slot)


def test_what_it_does_not_stack_default_collate_makes_or_refuses_as_it_would():
    torch = torch_or_skip()
    import numpy as np

    class Scalars(torch.utils.data.Dataset):  # NumPy scalars: default_collate makes them a tensor
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return np.float32(i)

    for batch, b in zip(_loader(dataset=Scalars(), batch=4, workers=1), range(2), strict=True):
        assert not isinstance(batch, sluice.SlotBatch)
        _same(batch, torch.utils.data.default_collate([np.float32(i) for i in range(4 * b, 4 * b + 4)]))

    class Ragged(torch.utils.data.Dataset):  # unequal shapes: default_collate cannot stack them either
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return torch.zeros(i + 1)

    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        next(iter(_loader(dataset=Ragged(), batch=4, workers=1)))


def test_with_no_workers_it_is_default_collate():
    got = list(_loader(workers=0))
    for batch, want in zip(got, _reference(), strict=True):
        _same(batch, want)


def test_slots_must_be_a_whole_number_of_batches():
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(ValueError, match="slots"):
            sluice.PinnedCollate(slots=bad)


def _on(device, value):
    torch = torch_or_skip()
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _on(device, v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_on(device, v) for v in value])
    if isinstance(value, list) and value and not isinstance(value[0], str):
        return [_on(device, v) for v in value]
    return value


@gpu
def test_on_the_gpu_the_slots_are_page_locked_and_copied_where_they_lie():
    torch = torch_or_skip()
    from sluice._batch_tree import flatten
    batch = next(iter(_loader()))
    flat = flatten(torch, batch)
    assert flat.page_locked and all(piece[2] for piece in flat.pieces if piece[1] > 0)
    for got, want in zip(sluice.Prefetcher(_loader()), _reference(), strict=True):
        _same(got, _on("cuda", want))


def test_a_batch_that_fails_to_fill_its_slot_leaves_the_slot_free():
    """default_collate's own error (an int past int64) is raised where the batch was, and the one
    slot it had claimed takes the next batches."""
    torch = torch_or_skip()

    class Overflow(torch.utils.data.Dataset):
        def __len__(self):
            return 32

        def __getitem__(self, i):
            return {"x": torch.full((4,), float(i)), "n": 2 ** 70 if i == 3 else i}

    it = iter(_loader(dataset=Overflow(), batch=8, workers=1, slots=1))
    # The DataLoader re-raises a worker's error as its own type where it can (torch 2), else as
    # a RuntimeError (torch 1.13).
    with pytest.raises((ValueError, RuntimeError), match="Overflow"):
        next(it)
    kinds = []
    for batch, i in zip(it, (8, 16, 24), strict=True):
        kinds.append(isinstance(batch, sluice.SlotBatch))
        got = batch.tensors() if kinds[-1] else batch
        assert torch.equal(got["n"], torch.arange(i, i + 8))
        del batch, got
    assert kinds[0], "the failed batch's slot stayed taken"


def test_a_fork_of_this_process_letting_go_of_a_batch_leaves_its_slot_taken():
    """A process forked while a batch lives (another DataLoader's worker) shares the slots' state
    bytes: its collecting the batch must not hand the slot back to the worker under this process."""
    import gc
    import os
    torch = torch_or_skip()
    it = iter(_loader(n=64, batch=8, workers=1, slots=1))
    first = next(it)
    assert isinstance(first, sluice.SlotBatch)
    image = first.tensors()["image"]
    child = os.fork()
    if child == 0:
        del first, image
        gc.collect()
        os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    later = [next(it) for _ in range(4)]
    assert not any(isinstance(b, sluice.SlotBatch) for b in later), "a slot still read was written"
    assert torch.equal(image, torch.stack([torch.full((3, 4, 5), float(i)) for i in range(8)]))


def _mapped_files():
    with open("/proc/self/maps") as maps:
        return {line.split()[4] for line in maps if "sluice-batches" in line}


def test_a_workers_file_is_unmapped_once_it_has_exited_and_its_batches_are_gone():
    """No later worker's first batch is needed: the last batch's going lets go of the file."""
    import gc
    before = _mapped_files()
    got = list(_loader(workers=2))  # the loader's iterator ends: its workers have exited
    assert all(isinstance(b, sluice.SlotBatch) for b in got)
    tensors = [b.tensors() for b in got[-2:]]  # one batch of each worker
    files = _mapped_files() - before
    assert len(files) == 2
    del got
    gc.collect()
    assert _mapped_files() & files == files, "a file was unmapped while a batch's tensors lived"
    del tensors
    gc.collect()
    assert not _mapped_files() & files, "an exited worker's file stays mapped"


_COLLECTED_UNDER_THE_LOCK = """
import gc, torch, sluice
from sluice import pinned_collate
class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 16
    def __getitem__(self, i):
        return torch.full((4,), float(i))
loader = torch.utils.data.DataLoader(Data(), batch_size=8, num_workers=1, collate_fn=sluice.PinnedCollate())
for batch in loader:
    cycle = [batch.tensors()]
    cycle.append(cycle)
    del batch, cycle
    with pinned_collate._lock:  # as when a collection runs inside _arrive (it allocates there)
        gc.collect()
print("done")
"""


def test_a_batch_collected_while_its_lock_is_held_does_not_deadlock():
    """A batch in a reference cycle is freed by whatever allocation runs the cycle collector,
    which may be one made while this module's lock is held, on the same thread."""
    import subprocess
    import sys
    torch_or_skip()
    run = subprocess.run([sys.executable, "-c", _COLLECTED_UNDER_THE_LOCK], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and "done" in run.stdout, run.stderr


def _open_files():
    return [fd for fd in os.listdir("/proc/self/fd") if "sluice-batches" in _link(fd)]


def _link(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def test_a_workers_file_that_cannot_be_mapped_here_is_closed(monkeypatch):
    from sluice import pinned_collate

    def refused(address, size):
        raise OSError("page-locking refused")

    monkeypatch.setattr(pinned_collate, "_page_lock", refused)
    before = _open_files()
    it = iter(_loader(workers=1))
    with pytest.raises(OSError, match="page-locking refused"):
        next(it)
    del it
    assert _open_files() == before


def test_a_new_worker_with_a_reused_pid_gets_a_file_key_of_its_own(monkeypatch):
    """A worker's pid is reused once it exits, while this process may still hold its file (its last
    batches alive): a new worker with that pid, at the same count of files, must not be taken for it,
    or its batches would be read from the old worker's file."""
    import itertools
    from sluice import pinned_collate
    regions = []
    for _ in range(2):  # each worker forked with the same count of files made so far
        monkeypatch.setattr(pinned_collate._Region, "_made", itertools.count(3), raising=False)
        regions.append(pinned_collate._Region(1, pinned_collate._GRAIN))
    try:
        assert regions[0].key != regions[1].key
    finally:
        for region in regions:
            region.map.close()
            os.close(region.fd)
