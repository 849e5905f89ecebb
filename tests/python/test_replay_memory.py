"""A replayed torch compute that allocates (ops without out=) keeps its memory for its graph: the
capture's allocations come from a pool the pipeline holds while the graph may replay, so what torch
frees, caches or hands to other tensors afterwards is never what the graph writes. (Four replays
were right, then after torch.cuda.empty_cache() a replay failed with an illegal address.)"""
import numpy as np
import pytest

import sluice
from conftest import gpu, torch_or_skip


def has_mem_pool(torch):
    return hasattr(torch.cuda, "MemPool") and hasattr(torch.cuda, "use_mem_pool")


@gpu
def test_a_replayed_compute_that_allocates_survives_empty_cache_and_other_tensors():
    torch = torch_or_skip()
    if not has_mem_pool(torch):
        pytest.skip(f"torch {torch.__version__} has no torch.cuda.MemPool (such a capture is refused instead)")
    n = 4_000_000
    a = torch.arange(n, dtype=torch.float32).pin_memory()
    out = torch.full((n,), float("nan")).pin_memory()
    expected = (a * 2 + 1) * 3
    p = sluice.Pipeline()
    x, y = p.input(a), p.output(out)
    # Two temporaries per chunk: c[x] * 2 and (... + 1), made and freed by torch during capture.
    p.compute(lambda c: torch.mul((c[x] * 2) + 1, 3, out=c[y]), replay=True)
    for run in range(4):
        out.fill_(float("nan"))
        p.run()
        assert torch.equal(out, expected), f"run {run}"
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    # Other tensors now take whatever torch has: were the graph's temporaries among it, these
    # would be overwritten by the replay, or the replay would touch memory given back.
    others = [torch.full((1 << 20,), 7.0, device="cuda") for _ in range(64)]
    for run in range(2):
        out.fill_(float("nan"))
        p.run()
        torch.cuda.synchronize()
        assert torch.equal(out, expected), f"run {run} after empty_cache()"
    assert all(bool((t == 7.0).all()) for t in others)


@gpu
def test_without_mem_pool_an_allocating_capture_is_refused():
    torch = torch_or_skip()
    if has_mem_pool(torch):
        pytest.skip(f"torch {torch.__version__} has torch.cuda.MemPool: the capture keeps its memory instead")
    a = torch.arange(100_000, dtype=torch.float32).pin_memory()
    out = torch.zeros(100_000).pin_memory()
    p = sluice.Pipeline()
    x, y = p.input(a), p.output(out)
    p.compute(lambda c: c[y].copy_(c[x] * 2), replay=True)
    with pytest.raises(RuntimeError, match="allocated device memory while its run was captured"):
        p.run()


@gpu
def test_a_replay_refused_for_pageable_arrays_says_what_python_can_do():
    torch_or_skip()
    p = sluice.Pipeline(host_memory="stage")
    x, y = p.input(np.arange(1000, dtype=np.float32)), p.output(np.zeros(1000, np.float32))
    p.compute(lambda c: c[y].copy_(c[x]), replay=True)
    with pytest.raises(ValueError) as refused:
        p.run()
    text = str(refused.value)
    assert "replay=True" in text and "pin_memory()" in text
    assert "sluice::" not in text and "Replay::graph" not in text


@gpu
def test_the_exception_a_compute_raised_comes_back_as_itself():
    torch_or_skip()

    class Mine(Exception):
        pass

    p = sluice.Pipeline(chunk_items=100)
    x, y = p.input(np.arange(1000, dtype=np.float32)), p.output(np.zeros(1000, np.float32))

    def fn(c):
        if c.index == 3:
            raise Mine("from chunk 3")
        c[y].copy_(c[x])

    p.compute(fn)
    with pytest.raises(Mine, match="from chunk 3"):
        p.run()
