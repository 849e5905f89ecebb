#!/usr/bin/env python3
"""sluice.Prefetcher beside what PyTorch users run, in one process, rows side by side.

Image-sized batches (64 x 3 x 224 x 224 float32, 38.5 MB) from a DataLoader with worker
processes: the DataLoader alone (no copy), its usual loop (pin_memory=True, .to(non_blocking=True)),
and sluice.Prefetcher over it; the same DataLoader whose workers collate into page-locked slots
(collate_fn=sluice.PinnedCollate()), alone and under sluice.Prefetcher. In-process pageable batches from a generator: .to('cuda') per
batch, a careful expert's loop (a reused pinned buffer, a copy stream, events, one batch ahead),
and sluice.Prefetcher; their H2D rate beside the bound min(host staging, link), both measured
in this run by sluice's probes (_engine_rates).

Each method runs once verifying every batch on the GPU (bitwise against the batch the dataset
made), then timed after --warm batches (a pass's first batches size its slots). GPU idle at a
step cost is 1 - (the same steps over a resident batch) / (the loop's time), both timed with
events on the step's stream.

  python3 bench/prefetch_bench.py --out prefetch.json [--batches 120] [--workers 8]
"""
import argparse
import json
import sys
import time

from peer_common import sleep_cycles_per_ms, torch_or_skip

MB = 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--batches", type=int, default=120)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--step-ms", default="2,5,10")
    p.add_argument("--gen-step-ms", default="1")
    p.add_argument("--rounds", type=int, default=2, help="each row this many times, in turn; the best is kept")
    p.add_argument("--warm", type=int, default=10, help="batches each timed run takes before its clock starts")
    a = p.parse_args()
    torch = torch_or_skip(a.out)
    if torch is None:
        return 0
    import sluice
    from torch.utils.data import DataLoader, Dataset

    dev = torch.device("cuda", 0)
    cycles_per_ms = sleep_cycles_per_ms(torch)
    rates = sluice._sluice._engine_rates(0)
    bound_gbps = min(rates["h2d_gbps"], rates["staging_gbps"])
    shape = (3, 224, 224)
    base = torch.rand(shape, generator=torch.Generator().manual_seed(7))
    base_gpu = base.to(dev)

    class Images(Dataset):
        def __len__(self):
            return 1 << 20

        def __getitem__(self, i):
            return base + float(i % 4096), i % 4096

    # One DataLoader each way, its workers kept between passes: a pass does not pay for their start.
    loaders = {pin: DataLoader(Images(), batch_size=a.batch, num_workers=a.workers, pin_memory=pin,
                               persistent_workers=True, prefetch_factor=4) for pin in (False, True)}

    # The workers collate into slots of page-locked memory this process shares (sluice.PinnedCollate):
    # enough slots a worker for the batches its queue holds and those the prefetcher holds.
    loaders["slots"] = DataLoader(Images(), batch_size=a.batch, num_workers=a.workers,
                                  collate_fn=sluice.PinnedCollate(slots=6), persistent_workers=True, prefetch_factor=4)

    def loader(pin):
        return loaders[pin]

    def check(images, labels):
        """Mismatching elements, counted on the GPU (no host sync)."""
        on = base_gpu if images.is_cuda else base
        want = on.unsqueeze(0) + labels.to(images.device, images.dtype).view(-1, 1, 1, 1)
        return (images != want).sum().to(dev)

    def usual(dl):  # the loop most PyTorch users write
        for images, labels in dl:
            yield images.to(dev, non_blocking=True), labels.to(dev, non_blocking=True)

    def steps(stream_iter, count, step_ms, verify):
        """(wall s, loop ms on the stream, mismatches) over `count` batches after `--warm` batches."""
        it = iter(stream_iter)
        bad = torch.zeros((), dtype=torch.int64, device=dev)
        for _ in range(a.warm):  # each pass's first batches size its slots: a pass's start, not its rate
            first = next(it)
            if verify:
                bad += check(*first)
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        n = 0
        for images, labels in it:
            if verify:
                bad += check(images, labels)
            else:
                bad += labels[:1].sum()  # reads the batch: the step waits for it
            if step_ms > 0:
                torch.cuda._sleep(int(step_ms * cycles_per_ms))
            n += 1
            if n == count:
                break
        stop.record()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        if n < count:
            raise RuntimeError(f"the source ended after {n} of {count} timed batches")
        if hasattr(it, "close"):
            it.close()
        return wall, start.elapsed_time(stop), int(bad)

    def resident_ms(count, step_ms):
        labels = torch.arange(a.batch, device=dev)
        bad = torch.zeros((), dtype=torch.int64, device=dev)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(count):
            bad += labels[:1].sum()
            if step_ms > 0:
                torch.cuda._sleep(int(step_ms * cycles_per_ms))
        stop.record()
        torch.cuda.synchronize()
        return start.elapsed_time(stop)

    rows = []
    batch_mb = a.batch * base.numel() * 4 / MB

    def row(workload, method, step_ms, make, count):
        _, _, bad = steps(make(), min(count, 30), 0, True)  # verified: the warm-up batches and 30 more
        wall, loop_ms, _ = steps(make(), count, step_ms, False)
        r = {"workload": workload, "method": method, "step_ms": step_ms, "batches": count,
             "batches_per_s": count / wall, "gbps": count * batch_mb / 1e3 / wall, "mismatches": bad}
        if step_ms > 0:
            r["idle"] = max(0.0, 1 - resident_ms(count, step_ms) / loop_ms)
        rows.append(r)
        print(f"  {workload:10} {method:54} step {step_ms:>4} ms  {r['batches_per_s']:7.1f} batches/s "
              f"{r['gbps']:6.2f} GB/s  idle {r.get('idle', float('nan')):6.3f}  bad {bad}", flush=True)

    n = a.batches
    plan = []  # (workload, method, step, make): run in turn, `rounds` times
    print(f"bound: link H2D {rates['h2d_gbps']:.1f} GB/s, host staging {rates['staging_gbps']:.1f} GB/s "
          f"({rates['staging_threads']} threads)", flush=True)
    # DataLoader with workers: alone, the usual loop, sluice.
    alone = lambda: ((images, labels) for images, labels in loader(False))  # noqa: E731 - no copy at all
    plan.append(("dataloader", "DataLoader alone (no copy)", 0.0, alone))

    def touched():  # what reading each batch once on the host costs the DataLoader (its pages first touched)
        for images, labels in loader(False):
            images.sum()
            yield images, labels
    plan.append(("dataloader", "DataLoader alone, each batch summed on the host", 0.0, touched))
    slots_alone = lambda: (b.tensors() for b in loader("slots"))  # noqa: E731 - no copy at all
    plan.append(("dataloader", "DataLoader(collate_fn=PinnedCollate) alone (no copy)", 0.0, slots_alone))
    for step_ms in [0.0] + [float(s) for s in a.step_ms.split(",")]:
        if step_ms > 0:  # the GPU's idle with the DataLoader's own delivery (the batches stay on the host)
            plan.append(("dataloader", "DataLoader alone (no copy)", step_ms, alone))
        plan.append(("dataloader", "pin_memory=True + .to(non_blocking)", step_ms, lambda: usual(loader(True))))
        plan.append(("dataloader", "sluice.Prefetcher(DataLoader)", step_ms, lambda: sluice.Prefetcher(loader(False))))
        plan.append(("dataloader", "sluice.Prefetcher(DataLoader, thread=False)", step_ms,
                     lambda: sluice.Prefetcher(loader(False), thread=False)))
        # Staging needs few threads at a DataLoader's rate; more take cores from its workers.
        plan.append(("dataloader", "sluice.Prefetcher(DataLoader, threads=4)", step_ms,
                     lambda: sluice.Prefetcher(loader(False), threads=4)))
        plan.append(("dataloader", "sluice.Prefetcher(DataLoader(collate_fn=PinnedCollate))", step_ms,
                     lambda: sluice.Prefetcher(loader("slots"))))

    # In-process pageable batches (a generator): image j of batch k is base + 64 k + j, its label
    # 64 k + j, so that check() verifies them as it does the dataset's.
    labels_of = [torch.arange(a.batch) + a.batch * k for k in range(4)]
    pool = [(base.unsqueeze(0) + labels.float().view(-1, 1, 1, 1), labels) for labels in labels_of]

    def generator(count):
        for k in range(count + 1):
            yield pool[k % 4]

    def plain(count):
        for images, labels in generator(count):
            yield images.to(dev), labels.to(dev)

    def expert(count):
        """A reused pinned buffer pair, a copy stream, events; one batch ahead."""
        copy = torch.cuda.Stream()
        pinned = [torch.empty_like(pool[0][0]).pin_memory() for _ in range(2)]
        done_reading = [torch.cuda.Event() for _ in range(2)]
        ready = None
        pending = None
        for k, (images, labels) in enumerate(generator(count)):
            slot = k % 2
            done_reading[slot].synchronize()
            pinned[slot].copy_(images)
            with torch.cuda.stream(copy):
                gpu = pinned[slot].to(dev, non_blocking=True)
                gl = labels.to(dev, non_blocking=True)
                done_reading[slot].record(copy)
                ev = torch.cuda.Event()
                ev.record(copy)
            if pending is not None:
                torch.cuda.current_stream().wait_event(ready)
                yield pending
            pending, ready = (gpu, gl), ev
            gpu.record_stream(torch.cuda.current_stream())
        torch.cuda.current_stream().wait_event(ready)
        yield pending

    for step_ms in [0.0] + [float(s) for s in a.gen_step_ms.split(",")]:
        plan.append(("generator", ".to('cuda') per batch", step_ms, lambda: plain(n + a.warm)))
        plan.append(("generator", "expert: pinned pair + copy stream", step_ms, lambda: expert(n + a.warm)))
        plan.append(("generator", "sluice.Prefetcher(generator)", step_ms, lambda: sluice.Prefetcher(generator(n + a.warm))))
        plan.append(("generator", "sluice.Prefetcher(generator, thread=False)", step_ms,
                     lambda: sluice.Prefetcher(generator(n + a.warm), thread=False)))
    for _ in range(a.rounds):
        for workload, method, step_ms, make in plan:
            row(workload, method, step_ms, make, n)
    # The best round of each row, for the summary (every round stays in the JSON).
    best_rows = {}
    for r in rows:
        key = (r["workload"], r["method"], r["step_ms"])
        if key not in best_rows or r["batches_per_s"] > best_rows[key]["batches_per_s"]:
            best_rows[key] = r

    result = {"device": torch.cuda.get_device_name(0), "batch_mb": batch_mb, "rates": rates,
              "bound_gbps": bound_gbps, "rows": rows}
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)

    dl_alone = best_rows[("dataloader", "DataLoader alone (no copy)", 0.0)]["batches_per_s"]
    print(f"\nsummary, best of {a.rounds} rounds (targets: DataLoader >= 0.9 of alone, idle <= 0.01 where it keeps up; "
          f"generator >= 0.9 of bound)")
    for r in best_rows.values():
        ratio = r["batches_per_s"] / dl_alone if r["workload"] == "dataloader" else r["gbps"] / bound_gbps
        of = "of DataLoader alone" if r["workload"] == "dataloader" else "of min(staging, link)"
        print(f"| {r['workload']} | {r['method']} | {r['step_ms']} | {r['batches_per_s']:.1f} | {r['gbps']:.2f} | "
              f"{ratio:.2f} {of} | {r.get('idle', float('nan')):.3f} | {r['mismatches']} |")
    return 1 if any(r["mismatches"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
