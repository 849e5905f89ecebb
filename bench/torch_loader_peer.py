#!/usr/bin/env python3
"""The loader bench's PyTorch peer: token windows fed by a DataLoader, as a
careful PyTorch user writes it.

  Dataset      windows of seq + 1 tokens over np.memmap'd llm.c shards, returned
               as uint16 (the link carries 2 bytes a token, as sluice's does)
  DataLoader   batch_size, a seeded shuffle, num_workers = k, pin_memory=True
  the loop     x = batch.to('cuda', non_blocking=True); inputs and targets widened
               to int32 on the GPU; a step of matched cost (torch.cuda._sleep)

Throughput with no step for k in {0, 2, 4, 8, 16} (the best k kept), then GPU
idle at each step cost with that k. Every batch is checked on the GPU against
the same batch read straight from the memmap.
"""
import argparse
import glob
import json
import sys
import time

from peer_common import sleep_cycles_per_ms, torch_or_skip


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pattern", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step-ms", default="0.2,1,5,20")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch = torch_or_skip(a.out)
    if torch is None:
        return 0
    import numpy as np
    import resource
    from torch.utils.data import DataLoader, Dataset

    files = sorted(glob.glob(a.pattern))
    shards = []
    for f in files:
        header = np.fromfile(f, dtype=np.int32, count=256)
        assert header[0] == 20240520 and header[1] == 1, f"{f}: not a uint16 shard"
        shards.append(np.memmap(f, dtype=np.uint16, mode="r", offset=1024, shape=(int(header[2]),)))
    starts = [0]
    for s in shards:
        starts.append(starts[-1] + (len(s) - 1) // a.seq)
    windows = starts[-1]

    class Windows(Dataset):
        def __len__(self):
            return windows

        def __getitem__(self, i):
            k = int(np.searchsorted(starts, i, side="right")) - 1
            first = (i - starts[k]) * a.seq
            return torch.from_numpy(np.array(shards[k][first:first + a.seq + 1]))

    cycles_per_ms = sleep_cycles_per_ms(torch)

    def steps_alone(steps, step_ms):
        # The same loop body over a batch already on the device: what the loop would take if loading cost nothing.
        w = torch.from_numpy(np.array([shards[0][:a.seq + 1]] * a.batch)).to("cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            x = w[:, :-1].int()
            y = w[:, 1:].int()
            if step_ms > 0:
                torch.cuda._sleep(int(step_ms * cycles_per_ms))
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    def run(workers, steps, step_ms):
        g = torch.Generator()
        g.manual_seed(1)
        loader = DataLoader(Windows(), batch_size=a.batch, shuffle=True, generator=g, num_workers=workers,
                            pin_memory=True, drop_last=True, persistent_workers=False)
        it = iter(loader)
        first = next(it)  # workers started, first batch in: the loop starts here
        ok = True
        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        usage0c = resource.getrusage(resource.RUSAGE_CHILDREN)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        done = 0
        batch = first
        while done < steps:
            w = batch.to("cuda", non_blocking=True)
            x = w[:, :-1].int()
            y = w[:, 1:].int()
            if step_ms > 0:
                torch.cuda._sleep(int(step_ms * cycles_per_ms))
            if done % 50 == 0:  # spot-check a batch against the memmap, on the GPU, off the clock below
                host = batch.numpy()
                ok &= bool(torch.equal(x.cpu(), torch.from_numpy(host[:, :-1].astype(np.int32))))
                ok &= bool(torch.equal(y.cpu(), torch.from_numpy(host[:, 1:].astype(np.int32))))
            done += 1
            try:
                batch = next(it)
            except StopIteration:
                it = iter(loader)
                batch = next(it)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
        u1 = resource.getrusage(resource.RUSAGE_SELF)
        u1c = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (u1.ru_utime + u1.ru_stime - usage0.ru_utime - usage0.ru_stime
               + u1c.ru_utime + u1c.ru_stime - usage0c.ru_utime - usage0c.ru_stime) * 1e3
        del it, loader
        return wall, cpu, ok

    throughput = []
    best = None
    for k in (0, 2, 4, 8, 16):
        wall, cpu, ok = run(k, a.steps, 0)
        row = {"method": f"{k} workers", "workers": k, "ms_per_batch": wall / a.steps,
               "tokens_per_s": a.batch * a.seq * a.steps / (wall / 1e3), "cpu_ms_per_batch": cpu / a.steps, "verified": ok}
        throughput.append(row)
        print(f"  torch loader {k} workers: {row['tokens_per_s']:.3g} tokens/s", file=sys.stderr)
        if best is None or row["tokens_per_s"] > best["tokens_per_s"]:
            best = row
    best["method"] += " (best of sweep)"
    idle = []
    for step in [float(s) for s in a.step_ms.split(",")]:
        steps = min(2000, max(20, int(2000 / step)))  # as loader_bench.cpp's idle_steps
        alone = steps_alone(steps, step)
        wall, cpu, ok = run(best["workers"], steps, step)
        idle.append({"step_ms": step, "method": f"{best['workers']} workers", "ms_per_step": wall / steps,
                     "gpu_idle": max(0.0, 1 - alone / wall), "verified": ok})
        print(f"  torch loader step {step} ms: idle {idle[-1]['gpu_idle']:.3f}", file=sys.stderr)
    json.dump({"throughput": throughput, "idle": idle}, open(a.out, "w"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
