"""A soak on the GPU: hundreds of pipelines of every kind in one process (NumPy and torch, pinned and
pageable, replayed and not, rebind, clear_spans, zero-length, refused, memory-mapped, interrupted,
several parts), torch's own copies of fresh memory in between, and afterwards: every range sluice
page-locked that has ended is not page-locked now (asked of the driver), no unlocking failed, no range
lives beyond its pipeline, and host and device memory stay flat.

SLUICE_SOAK_PIPELINES sets how many pipelines (default 300), SLUICE_SOAK_SEED the seed. It prints a
summary (pytest -s shows it; scripts/gpu-python runs it so).

What it looks for (seen once): in a process that had run a few dozen pipelines, after one that
page-locked arrays and let them go, torch.from_numpy(fresh).to('cuda') raised "CUDA error: invalid
argument": a page-locking that outlived its pipeline, or one that covered memory beside its array.
"""
import collections
import gc
import os
import resource
import tempfile

import numpy as np
import pytest

import sluice
from sluice import _sluice
from conftest import gpu, torch_or_skip

PIPELINES = int(os.environ.get("SLUICE_SOAK_PIPELINES", "300"))
SEED = int(os.environ.get("SLUICE_SOAK_SEED", "1"))


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def page_locked(address):
    return _sluice.memory_kind(address, 1) in ("pinned", "registered")


def ledger():
    return [dict(zip(("begin", "bytes", "live", "unlock_failed"), r)) for r in _sluice._page_lock_ledger()]


PAGE = 4096


class Soak:
    def __init__(self, torch, rng, workdir):
        self.torch, self.rng, self.workdir = torch, rng, workdir
        self.tally = collections.Counter()
        # Pinned memory comes from here only, made before any pipeline, so that no range a pipeline
        # page-locked and let go can be torch's pinned memory later.
        self.pinned = [torch.empty(1 << 20, dtype=torch.float32).pin_memory() for _ in range(4)]

    # -- what every scenario shares
    def items(self):
        return int(self.rng.choice([1, 7, 1000, 4097, 50_000, 300_001, 2_000_000]))

    def pageable(self, n, dtype=np.float32):
        return (self.rng.integers(0, 1000, n)).astype(dtype)

    def fresh_copies(self, count=3):
        """torch's own copy of fresh pageable memory, of sizes that land beside arrays just let go."""
        torch = self.torch
        for _ in range(count):
            n = int(self.rng.choice([3, 1000, 30_000, 100_000, 1_000_003]))
            fresh = self.rng.integers(0, 1 << 20, n).astype(np.float32)
            back = torch.from_numpy(fresh).to("cuda").cpu().numpy()
            np.testing.assert_array_equal(back, fresh)
            self.tally["fresh copies"] += 1

    def run_checked(self, p, fn, a, out, expect, runs=2):
        p.compute(fn)
        for _ in range(runs):
            out[...] = -1
            p.run()
            np.testing.assert_array_equal(np.asarray(out), expect)
            self.tally["runs"] += 1

    # -- the scenarios: each builds a pipeline, checks it, and lets it go
    def numpy_pageable(self, host_memory):
        n = self.items()
        a, out = self.pageable(n), np.zeros(n, np.float32)
        p = sluice.Pipeline(host_memory=host_memory)
        x, y = p.input(a), p.output(out)
        self.run_checked(p, lambda c: self.torch.add(c[x], 1, out=c[y]), a, out, a + 1, runs=3)
        if host_memory == "automatic":  # it holds the arrays, so it keeps their whole pages page-locked while it lives
            begin = a.__array_interface__["data"][0]
            first_page = (begin + PAGE - 1) // PAGE * PAGE
            if first_page + PAGE <= begin + a.nbytes:  # it holds a whole page: that page is locked
                assert any(r["live"] and r["begin"] <= first_page < r["begin"] + r["bytes"] for r in ledger()), \
                    "the automatic policy left the pipeline's input unlocked after three runs"
            # Never the bytes before it in its first page, which are other memory's.
            if begin % PAGE:
                assert not any(r["live"] and r["begin"] <= begin - 1 < r["begin"] + r["bytes"] for r in ledger()), \
                    "a neighbour's bytes before the array are page-locked"
        self.fresh_copies()  # while the pipeline lives and keeps its arrays page-locked

    def torch_tensors(self, pinned):
        torch = self.torch
        n = min(self.items(), 1 << 20)
        if pinned:
            a, out = self.pinned[0][:n], self.pinned[1][:n]
            a.copy_(torch.from_numpy(self.pageable(n)))
        else:
            a, out = torch.from_numpy(self.pageable(n)), torch.zeros(n)
        p = sluice.Pipeline()
        x, y = p.input(a), p.output(out)
        self.run_checked(p, lambda c: torch.mul(c[x], 3, out=c[y]), a, out.numpy(), a.numpy() * 3)

    def replayed(self, allocating):
        torch = self.torch
        n = int(self.rng.integers(1000, 1 << 20))
        a, out = self.pinned[2][:n], self.pinned[3][:n]
        a.copy_(torch.from_numpy(self.pageable(n)))
        if allocating and not hasattr(torch.cuda, "MemPool"):
            allocating = False
        p = sluice.Pipeline()
        x, y = p.input(a), p.output(out)
        fn = (lambda c: torch.mul(c[x] + 1, 2, out=c[y])) if allocating else (lambda c: torch.mul(c[x], 2, out=c[y]))
        p.compute(fn, replay=True)
        expect = (a.numpy() + 1) * 2 if allocating else a.numpy() * 2
        for _ in range(4):
            out.fill_(-1)
            p.run()
            np.testing.assert_array_equal(out.numpy(), expect)
            self.tally["runs"] += 1
        if allocating:
            torch.cuda.empty_cache()
            out.fill_(-1)
            p.run()
            np.testing.assert_array_equal(out.numpy(), expect)

    def rebound(self):
        n = self.items()
        a, out = self.pageable(n), np.zeros(n, np.float32)
        p = sluice.Pipeline()
        x, y = p.input(a), p.output(out)
        self.run_checked(p, lambda c: c[y].copy_(c[x] - 1), a, out, a - 1)
        for _ in range(3):
            m = self.items()
            a, out = self.pageable(m), np.zeros(m, np.float32)
            expect = a - 1
            p.rebind(x, a)
            p.rebind(y, out)
            del a  # the pipeline holds it
            gc.collect()
            out[...] = -1
            p.run()
            np.testing.assert_array_equal(out, expect)
            self.tally["rebinds"] += 1
        self.fresh_copies()

    def respanned(self):
        p = sluice.Pipeline()
        for _ in range(3):
            n = self.items()
            a, out = self.pageable(n, np.int32), np.zeros(n, np.int32)
            x, y = p.input(a), p.output(out)
            self.run_checked(p, lambda c: c[y].copy_(c[x] * 2), a, out, a * 2)
            p.clear_spans()
            self.tally["clear_spans"] += 1
            self.fresh_copies(1)

    def zero_length(self):
        p = sluice.Pipeline()
        x, y = p.input(np.zeros(0, np.float32)), p.output(np.zeros(0, np.float32))
        p.compute(lambda c: c[y].copy_(c[x]))
        assert p.run().chunk_count == 0

    def refused(self):
        p = sluice.Pipeline(host_memory="stage")
        x, y = p.input(self.pageable(1000)), p.output(np.zeros(1000, np.float32))
        p.compute(lambda c: c[y].copy_(c[x]), replay=True)
        with pytest.raises(ValueError, match="cannot be replayed"):
            p.run()
        q = sluice.Pipeline()
        q.input(np.zeros(10, np.float32))
        q.output(np.zeros(11, np.float32))
        q.compute(lambda c: None)
        with pytest.raises(ValueError):
            q.run()
        self.tally["refused"] += 2

    def interrupted(self):
        n = 400_000
        a, out = self.pageable(n), np.zeros(n, np.float32)
        p = sluice.Pipeline(chunk_items=50_000, host_memory=str(self.rng.choice(["automatic", "register"])))
        x, y = p.input(a), p.output(out)
        stop_at = int(self.rng.integers(0, 8))

        class Stop(Exception):
            pass

        def fn(c):
            if c.index == stop_at:
                raise Stop(c.index)
            c[y].copy_(c[x])

        p.compute(fn)
        with pytest.raises(Stop):
            p.run()
        p.compute(lambda c: c[y].copy_(c[x]))
        p.run()  # and it runs again, right
        np.testing.assert_array_equal(out, a)
        self.tally["interrupted"] += 1

    def memory_mapped(self):
        n = self.items()
        path = os.path.join(self.workdir, f"soak-{self.tally['memory-mapped']}.bin")
        self.pageable(n).tofile(path)
        a = np.memmap(path, np.float32, "r", shape=(n,))
        out = np.memmap(path + ".out", np.float32, "w+", shape=(n,))
        p = sluice.Pipeline()
        x, y = p.input(a), p.output(out)
        self.run_checked(p, lambda c: self.torch.add(c[x], 2, out=c[y]), a, out, np.asarray(a) + 2)
        del p, x, y
        gc.collect()
        out.flush()
        self.tally["memory-mapped"] += 1

    def parts(self):
        n = self.items()
        a, out = self.pageable(n), np.zeros(n, np.float32)
        p = sluice.MultiPipeline([0, 0])
        x, y = p.input(a), p.output(out)
        p.compute(lambda c, part: self.torch.add(c[x], part * 0, out=c[y]))
        p.run()
        np.testing.assert_array_equal(out, a)
        self.tally["multi"] += 1

    def scenarios(self):
        return [lambda: self.numpy_pageable("automatic"), lambda: self.numpy_pageable("register"),
                lambda: self.numpy_pageable("stage"), lambda: self.torch_tensors(False),
                lambda: self.torch_tensors(True), lambda: self.replayed(False), lambda: self.replayed(True),
                self.rebound, self.respanned, self.zero_length, self.refused, self.interrupted,
                self.memory_mapped, self.parts]


def check_ledger(tally):
    """No live range without a live pipeline; no ended range page-locked now, or left by a failed unlock."""
    records = ledger()
    live = [r for r in records if r["live"]]
    assert not live, f"{len(live)} ranges still page-locked with no pipeline alive: {live[:3]}"
    for r in records:
        assert not r["unlock_failed"], f"unlocking {r} failed"
        last = r["begin"] + r["bytes"] - 1
        assert not page_locked(r["begin"]) and not page_locked(last), f"{r} is still page-locked by the driver"
    tally["ranges checked"] = len(records)


@gpu
def test_hundreds_of_pipelines_leave_nothing_locked_and_memory_flat():
    torch = torch_or_skip()
    rng = np.random.default_rng(SEED)
    with tempfile.TemporaryDirectory() as workdir:
        soak = Soak(torch, rng, workdir)
        scenarios = soak.scenarios()
        warm_at = max(len(scenarios), PIPELINES // 10)
        warm = None
        for i in range(PIPELINES):
            scenarios[i % len(scenarios)]()
            soak.tally["pipelines"] += 1
            gc.collect()  # every pipeline of this one is gone now: so must its page-locking be
            soak.fresh_copies(1)
            if i % 20 == 19:
                check_ledger(soak.tally)
            if i + 1 == warm_at:
                torch.cuda.synchronize()
                warm = (rss_mib(), torch.cuda.memory_allocated())
        check_ledger(soak.tally)
        torch.cuda.synchronize()
        end = (rss_mib(), torch.cuda.memory_allocated())
    print(f"\nsoak: seed {SEED}, {dict(soak.tally)}, RSS {warm[0]:.0f} -> {end[0]:.0f} MiB, "
          f"torch allocated {warm[1]} -> {end[1]} bytes")
    assert end[1] <= warm[1] + 2**20, "torch's device memory grew after warm-up"
    assert end[0] <= warm[0] * 1.1 + 128, "host memory grew after warm-up"
