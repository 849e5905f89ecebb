"""sluice.Prefetcher: any batch through the ring. Most tests run the ring on its host executor
(_host_executor), so that they run where there is no GPU; the last ones run it on the GPU."""
import collections
import dataclasses
import gc
import threading
import warnings
import weakref

import pytest

import sluice
from conftest import gpu, torch_or_skip

HOST = {"jitter_us": 30, "seed": 3}


def _threads():
    return [t for t in threading.enumerate() if t.name == "sluice-prefetch"]


Pair = collections.namedtuple("Pair", "x y")


@dataclasses.dataclass(frozen=True)
class Sample:
    image: object
    label: object
    name: str


def _batches(torch, count, seed=0):
    """Batches of many shapes and kinds, their sizes changing from batch to batch."""
    import numpy as np
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in range(count):
        n = 1 + (b * 7) % 13
        out.append({
            "pixels": torch.rand(n, 3, 5, 7, generator=g),
            "ids": torch.randint(0, 1 << 40, (n,), generator=g, dtype=torch.int64),
            "mask": torch.rand(n, 4, generator=g) > 0.5,
            "half": torch.rand(n, 9, generator=g).to(torch.float16),
            "bf16": torch.rand(2, n, generator=g).to(torch.bfloat16),
            "np": np.arange(n * 3, dtype=np.int16).reshape(n, 3) + b,
            "pair": Pair(torch.full((n,), float(b)), [torch.arange(n, dtype=torch.int32), "tag"]),
            "sample": Sample(torch.rand(2, 2, generator=g), torch.tensor(b), f"s{b}"),
            "scalar": torch.tensor(3.5 + b),
            "empty": torch.zeros(0, 4),
            "strided": torch.arange(4 * n, dtype=torch.float64).reshape(4, n).t(),
            "step": b,
            "none": None,
        })
    return out


def _same(torch, got, want):
    """Same structure, types and values (tensors bitwise; NumPy arrays arrive as tensors)."""
    import numpy as np
    if isinstance(want, np.ndarray):
        want = torch.from_numpy(want)
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape)
        assert torch.equal(got.cpu(), want)  # random values, no NaN: equal values are equal bits
        return
    assert type(got) is type(want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            _same(torch, got[k], want[k])
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _same(torch, a, b)
    elif dataclasses.is_dataclass(want):
        for f in dataclasses.fields(want):
            _same(torch, getattr(got, f.name), getattr(want, f.name))
    else:
        assert got == want


@pytest.mark.parametrize("thread", [True, False])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_batch_comes_with_its_structure_and_values_in_order(seed, thread):
    torch = torch_or_skip()
    batches = _batches(torch, 12, seed)
    got = list(sluice.Prefetcher(batches, ahead=2, thread=thread, _host_executor={"jitter_us": 40, "seed": seed}))
    assert len(got) == 12
    for g, w in zip(got, batches):
        _same(torch, g, w)  # every batch was kept (list()): kept ones keep their values
    assert not _threads()


def test_a_tensor_or_an_array_alone_is_a_batch():
    torch = torch_or_skip()
    import numpy as np
    got = list(sluice.Prefetcher([torch.arange(5), np.ones(3, np.float32)], _host_executor=HOST))
    assert torch.equal(got[0], torch.arange(5))
    assert torch.equal(got[1], torch.ones(3))


@pytest.mark.parametrize("thread", [True, False])
def test_batches_the_loop_lets_go_are_correct_as_it_reads_them(thread):
    torch = torch_or_skip()
    batches = _batches(torch, 20)
    for k, batch in enumerate(sluice.Prefetcher(iter(batches), ahead=3, thread=thread, _host_executor=HOST)):
        _same(torch, batch, batches[k])


@pytest.mark.parametrize("thread", [True, False])
def test_an_exception_in_the_iterable_is_raised_by_the_loop_at_that_batch_as_itself(thread):
    torch = torch_or_skip()
    failure = KeyError("sample 7 is missing")

    def source():
        for b in range(10):
            if b == 4:
                raise failure
            yield torch.full((3,), b)

    seen = []
    with pytest.raises(KeyError) as raised:
        for batch in sluice.Prefetcher(source(), thread=thread, _host_executor=HOST):
            seen.append(int(batch[0]))
    assert raised.value is failure
    assert seen == [0, 1, 2, 3]
    assert not _threads()


@pytest.mark.parametrize("thread", [True, False])
def test_a_batch_that_fails_to_stage_fails_the_loop_at_it_and_nothing_hangs(thread):
    torch = torch_or_skip()
    data = [torch.full((64,), k) for k in range(12)]
    seen, outcome = [], {}

    def loop():
        try:
            for batch in sluice.Prefetcher(data, ahead=3, thread=thread, _host_executor={"fail_stage_at": 2}):
                seen.append(int(batch[0]))
        except RuntimeError as e:
            outcome["error"] = str(e)

    runner = threading.Thread(target=loop, daemon=True)
    runner.start()
    runner.join(20)
    assert not runner.is_alive(), "the loop hangs after a batch failed to stage"
    assert seen == [0, 1]
    assert "position 2" in outcome.get("error", "") and "stage" in outcome["error"], outcome
    assert not _threads()


def test_a_batch_of_an_unsupported_kind_fails_the_loop_at_that_batch():
    torch = torch_or_skip()
    import numpy as np
    batches = [torch.ones(2), np.array(["a", "b"], dtype=object)]
    with pytest.raises(TypeError, match="dtype object"):
        for _ in sluice.Prefetcher(batches, _host_executor=HOST):
            pass


@pytest.mark.parametrize("thread", [True, False])
@pytest.mark.parametrize("after", [0, 1, 5])
def test_leaving_the_loop_early_stops_the_thread(after, thread):
    torch = torch_or_skip()
    pulled = []

    def endless():
        k = 0
        while True:
            pulled.append(k)
            yield torch.full((1000,), k)
            k += 1

    for k, batch in enumerate(sluice.Prefetcher(endless(), ahead=2, thread=thread, _host_executor=HOST)):
        assert int(batch[0]) == k
        if k == after:
            break
    gc.collect()
    assert not _threads()
    # The loop's, `ahead` more, one being staged, one waiting for that, and one the producer was making;
    # with the loop's thread walking the iterable, just `ahead` beyond the loop's.
    assert len(pulled) <= after + 1 + 2 + (3 if thread else 0)


class Stateful:
    """An iterable that resumes: its state is how many batches it has handed out this pass."""

    def __init__(self, count):
        self.count, self.at = count, 0

    def __iter__(self):
        while self.at < self.count:
            self.at += 1
            yield [self.at - 1]

    def state_dict(self):
        return {"at": self.at}

    def load_state_dict(self, state):
        self.at = state["at"]


@pytest.mark.parametrize("thread", [True, False])
def test_the_state_is_the_inner_iterables_as_of_the_last_batch_the_loop_received(thread):
    torch_or_skip()
    inner = Stateful(10)
    p = sluice.Prefetcher(inner, ahead=3, thread=thread, _host_executor=HOST)
    loop = iter(p)
    for k in range(4):
        assert next(loop) == [k]
    state = p.state_dict()
    assert state == {"inner": {"at": 4}}  # not the batches held ahead
    loop.close()
    resumed = Stateful(10)
    q = sluice.Prefetcher(resumed, _host_executor=HOST)
    q.load_state_dict(state)
    assert [b[0] for b in q] == list(range(4, 10))


def test_the_state_of_an_iterable_without_one_is_refused():
    torch_or_skip()
    with pytest.raises(TypeError, match="has no state_dict"):
        sluice.Prefetcher([1, 2], _host_executor=HOST).state_dict()


def test_a_bad_ahead_is_refused():
    torch_or_skip()
    with pytest.raises(ValueError, match="ahead must be 1 to 30"):
        sluice.Prefetcher([], ahead=0, _host_executor=HOST)


def test_each_for_is_one_pass_over_the_iterable():
    torch = torch_or_skip()
    data = [torch.full((2,), k) for k in range(3)]
    p = sluice.Prefetcher(data, _host_executor=HOST)
    assert [int(b[0]) for b in p] == [0, 1, 2]
    assert [int(b[0]) for b in p] == [0, 1, 2]
    assert len(p) == 3


@pytest.mark.parametrize("thread", [True, False])
def test_each_batchs_host_arrays_are_let_go_without_waiting_for_the_cycle_collector(thread):
    """The prefetcher holds a batch's host arrays only until they are staged: nothing it makes per
    batch is a reference cycle, so they are freed at once, not when Python's cycle collector next
    runs (a DataLoader's shared memory piling up, then freed in one long pause)."""
    torch = torch_or_skip()
    from sluice._batch_tree import flatten
    refs = []

    def source(count):
        for k in range(count):
            batch = {"x": torch.full((1000,), float(k)), "nested": [(torch.arange(3) + k,)]}
            refs.extend(weakref.ref(t) for t in (batch["x"], batch["nested"][0][0]))
            yield batch

    gc.collect()
    gc.disable()
    try:
        flat = flatten(torch, next(source(1)))
        del flat
        assert all(r() is None for r in refs), "flatten() left a cycle holding the batch"
        refs.clear()
        for k, batch in enumerate(sluice.Prefetcher(source(12), ahead=2, thread=thread, _host_executor=HOST)):
            assert float(batch["x"][0]) == k
        del batch
        alive = sum(r() is not None for r in refs)
        assert alive == 0, f"{alive} of {len(refs)} host arrays still held once the loop is over"
    finally:
        gc.enable()


@pytest.mark.parametrize("thread", [True, False])
def test_a_dataloader_workers_batches_are_read_from_their_shared_memory_files(thread):
    """A worker's batch reaches this process as shared memory with its file descriptor: its leaves
    are staged from that file (pread), not through its pages here; each equals the data."""
    torch = torch_or_skip()
    import os
    from torch.utils.data import DataLoader, TensorDataset
    from sluice._batch_tree import flatten
    x = torch.rand(96, 3, 16, 16)
    y = torch.arange(96)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, num_workers=2)
    images, labels = next(iter(loader))
    pieces = flatten(torch, (images, labels)).pieces
    for tensor, (address, bytes_, pinned, fd, offset) in zip((images, labels), pieces):
        assert fd >= 0 and not pinned and address == tensor.data_ptr()
        assert os.pread(fd, bytes_, offset) == tensor.numpy().tobytes()
    seen = 0
    for images, labels in sluice.Prefetcher(loader, thread=thread, _host_executor=HOST):
        assert torch.equal(images, x[labels])
        seen += len(labels)
    assert seen == 96
    assert not _threads()


def test_a_tensor_not_received_from_another_process_is_read_where_it_lies_and_never_moved():
    """Only storages torch received by file descriptor are asked for theirs: asking any other would
    move it into new shared memory (one shared by name, as the file_system strategy does, is moved
    to a new address)."""
    torch = torch_or_skip()
    import torch.multiprocessing as mp
    from sluice._batch_tree import flatten
    plain = torch.rand(1000)
    shared = torch.rand(1000).share_memory_()
    strategy = mp.get_sharing_strategy()
    try:
        mp.set_sharing_strategy("file_system")
        by_name = torch.rand(1000).share_memory_()
    except RuntimeError as e:  # no torch_shm_manager here
        pytest.skip(f"shared memory by name: {e}")
    finally:
        mp.set_sharing_strategy(strategy)
    batch = {"plain": plain, "shared": shared, "by_name": by_name}
    before = {k: t.data_ptr() for k, t in batch.items()}
    pieces = flatten(torch, batch).pieces
    assert [p[3] for p in pieces] == [-1, -1, -1]
    assert {k: t.data_ptr() for k, t in batch.items()} == before
    got = list(sluice.Prefetcher([batch], _host_executor=HOST))
    assert all(torch.equal(got[0][k], t) for k, t in batch.items())


@gpu
def test_on_the_gpu_batches_equal_the_plain_copy():
    torch = torch_or_skip()
    batches = _batches(torch, 16)
    pinned = [{"p": torch.rand(1000, 33).pin_memory(), "q": torch.rand(7)} for _ in range(6)]
    for source in (batches, pinned):
        kept = []
        for k, batch in enumerate(sluice.Prefetcher(source, ahead=2)):
            for leaf in (batch["pixels"], batch["ids"]) if "pixels" in batch else (batch["p"], batch["q"]):
                assert leaf.is_cuda
            _same(torch, batch, source[k])
            kept.append(batch)
        torch.cuda.synchronize()
        for k, batch in enumerate(kept):
            _same(torch, batch, source[k])  # kept batches kept their memory
    assert not _threads()


@gpu
def test_on_the_gpu_a_side_stream_reads_each_batch_after_its_copy():
    torch = torch_or_skip()
    side = torch.cuda.Stream()
    data = [torch.full((1 << 20,), float(k)) for k in range(12)]
    sums = []
    with torch.cuda.stream(side):
        for batch in sluice.Prefetcher(data, ahead=3):
            torch.cuda._sleep(200_000)  # a slow step: the next copies would land early if unordered
            sums.append(batch.sum())
    side.synchronize()
    assert [float(s) for s in sums] == [float(k) * (1 << 20) for k in range(12)]


@gpu
def test_on_the_gpu_a_dataloader_with_workers_and_pinned_memory():
    torch = torch_or_skip()
    from torch.utils.data import DataLoader, TensorDataset
    x = torch.rand(256, 3, 8, 8)
    y = torch.arange(256)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, num_workers=2, pin_memory=True)
    seen = 0
    for images, labels in sluice.Prefetcher(loader):
        assert images.is_cuda and labels.is_cuda
        assert torch.equal(images.cpu(), x[labels.cpu()])
        seen += len(labels)
    assert seen == 256


@gpu
def test_the_prefetchers_thread_works_on_its_device():
    """CUDA calls the iterable makes on the prefetcher's thread (PinnedCollate page-locking a worker's
    file) go to the prefetcher's device, not to device 0, where each rank of a job would make a context."""
    torch = torch_or_skip()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs: a prefetcher on device 1")
    seen = []

    def batches():
        for k in range(3):
            seen.append(torch.cuda.current_device())
            yield torch.full((4,), float(k))

    got = [b.cpu() for b in sluice.Prefetcher(batches(), device=1)]
    assert [int(b[0]) for b in got] == [0, 1, 2]
    assert seen == [1, 1, 1]


def _refilled(torch, count, np=None):
    """A hand-written producer that refills one set of buffers and yields them again each time."""
    pixels = torch.empty(3, 64, 64) if np is None else np.empty((3, 64, 64), dtype=np.float32)
    labels = torch.empty(5, dtype=torch.int64) if np is None else np.empty(5, dtype=np.int64)
    for k in range(count):
        pixels[:] = float(k)
        labels[:] = k
        yield {"pixels": pixels, "labels": labels}


def _values(batch):
    """(pixels' first, pixels' last, every label) of a batch whose arrays are each filled with one value."""
    pixels, labels = batch["pixels"], batch["labels"]
    assert bool((pixels == pixels.reshape(-1)[0]).all()), "a batch mixes two fills"
    return int(pixels.reshape(-1)[0]), [int(v) for v in labels]


@pytest.mark.parametrize("ahead", [1, 3])
@pytest.mark.parametrize("kind", ["torch", "numpy"])
@pytest.mark.parametrize("thread", [True, False])
def test_an_iterable_that_refills_one_buffer_gives_each_batch_its_own_values(thread, kind, ahead):
    torch = torch_or_skip()
    np = pytest.importorskip("numpy") if kind == "numpy" else None
    got = [_values(b) for b in sluice.Prefetcher(_refilled(torch, 12, np), ahead=ahead, thread=thread,
                                                 _host_executor=HOST)]
    assert got == [(k, [k] * 5) for k in range(12)]


@pytest.mark.parametrize("thread", [True, False])
def test_a_for_left_early_over_an_iterator_hands_the_batches_it_fetched_to_the_next_for(thread):
    """As a plain `for` over an iterator: the next `for` goes on where the last one stopped."""
    torch = torch_or_skip()
    p = sluice.Prefetcher(_refilled(torch, 20), ahead=3, thread=thread, _host_executor=HOST)
    seen = []
    for leave_at in (5, 11, 12):  # three `for`s left early, the last after a single batch
        for batch in p:
            seen.append(_values(batch)[0])
            if len(seen) == leave_at:
                break
        assert not _threads()
    for batch in p:
        seen.append(_values(batch)[0])
    assert seen == list(range(20))
    assert [_values(b)[0] for b in p] == []  # the iterator is spent, as a plain `for` finds it


def test_a_for_left_early_over_a_reiterable_starts_the_next_pass_afresh():
    """A DataLoader (not its own iterator): each `for` is a pass of its own, whatever the last one left."""
    torch = torch_or_skip()
    data = [torch.full((4,), k) for k in range(8)]
    p = sluice.Prefetcher(data, ahead=3, _host_executor=HOST)
    for batch in p:
        if int(batch[0]) == 2:
            break
    assert [int(b[0]) for b in p] == list(range(8))


def test_the_batches_carried_to_the_next_for_are_dropped_by_load_state_dict():
    torch_or_skip()

    class Resumable:
        def __init__(self):
            self.at = 0

        def __iter__(self):
            return self

        def __next__(self):
            if self.at == 10:
                raise StopIteration
            self.at += 1
            return [self.at - 1]

        def state_dict(self):
            return {"at": self.at}

        def load_state_dict(self, state):
            self.at = state["at"]

    p = sluice.Prefetcher(Resumable(), ahead=3, _host_executor=HOST)
    for batch in p:
        if batch == [3]:
            break
    state = p.state_dict()
    assert state == {"inner": {"at": 4}}
    p.load_state_dict(state)
    assert [b[0] for b in p] == list(range(4, 10))


@pytest.mark.parametrize("thread", [True, False])
def test_an_iterator_that_raises_after_a_for_left_early_raises_in_the_next_for_after_the_batches_before(thread):
    torch = torch_or_skip()

    def five_then_fails():
        for k in range(5):
            yield torch.full((8,), k)
        raise ValueError("boom at 5")

    p = sluice.Prefetcher(five_then_fails(), ahead=3, thread=thread, _host_executor=HOST)
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no wait ran out on the way
        for batch in p:
            seen.append(int(batch[0]))
            break
        with pytest.raises(ValueError, match="boom at 5"):
            for batch in p:
                seen.append(int(batch[0]))
    assert seen == [0, 1, 2, 3, 4]
    assert not _threads()


def test_an_iterator_that_raises_while_the_loop_leaves_raises_in_the_next_for():
    """The producer is inside the iterator as the loop leaves, and the iterator raises there."""
    torch = torch_or_skip()
    release = threading.Event()

    def two_then_fails():
        yield torch.full((8,), 0)
        yield torch.full((8,), 1)
        release.wait(10)
        raise ValueError("boom while leaving")

    p = sluice.Prefetcher(two_then_fails(), ahead=3, _host_executor=HOST)
    threading.Timer(0.2, release.set).start()
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for batch in p:
            seen.append(int(batch[0]))
            break
        with pytest.raises(ValueError, match="boom while leaving"):
            for batch in p:
                seen.append(int(batch[0]))
    assert seen == [0, 1]
    assert not _threads()


@pytest.mark.parametrize("thread", [True, False])
def test_a_for_left_while_it_yields_the_carried_batches_carries_the_rest(thread):
    torch = torch_or_skip()
    p = sluice.Prefetcher((torch.full((8,), k) for k in range(12)), ahead=4, thread=thread, _host_executor=HOST)
    seen = []
    for leave_at in (1, 2, 3, None):  # the second and third `for`s leave among the carried batches
        for batch in p:
            seen.append(int(batch[0]))
            if len(seen) == leave_at:
                break
    assert seen == list(range(12))
    assert not _threads()
