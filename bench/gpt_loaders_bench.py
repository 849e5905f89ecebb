#!/usr/bin/env python3
"""The GPT example's training step with each loader in turn, in one process: what a loader costs the
step, told apart from how fast the process happens to be.

Runs of the example, one process a run, spread by 13-26 % whichever loader ran (resident batches by
14 % at one rank, 18 % at two), so three runs a loader could not resolve 1 %. Here every loader lives in one
job: rounds of blocks of steps, each block one loader's and each round in a rotated order, one model
trained throughout. A block's first `--lead` steps are left out of its time (the loader taking over;
its first batch is checked there), then `--block` steps are timed between two device syncs. Each
loader's block is set beside the resident block of its round ("paired"), so a slow stretch of the
machine touches both sides of a pair alike.

Every loader serves the same batches in the same order as the resident ones (the torch order of
examples/batches.py): the first batch of each block is compared with the resident batch of that
index, on every rank, and a mismatch fails the run.

    torchrun --nproc_per_node=2 bench/gpt_loaders_bench.py --data 'data/train_*.bin' --vocab 4096 --json out.json
"""
import argparse
import json
import pathlib
import random
import statistics
import sys
import time

import torch

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

from batches import ResidentBatches, SluiceBatches, TorchBatches  # noqa: E402
from train_gpt import Job, make_model, make_step  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="llm.c token shards (a glob pattern)")
    p.add_argument("--loaders", default="resident,sluice,torch", help="resident comes first; each at most once")
    p.add_argument("--workers", type=int, default=8, help="the DataLoader's workers; sluice's reader threads (0: one a core)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--block", type=int, default=60, help="timed steps a block")
    p.add_argument("--lead", type=int, default=10, help="steps at a block's start left out of its time")
    p.add_argument("--global-batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda where there is one")
    p.add_argument("--dist-timeout", type=float, default=1800, metavar="SECONDS",
                   help="how long a rank waits for the others in a collective")
    p.add_argument("--json", metavar="FILE", help="every block's figures (rank 0)")
    a = p.parse_args(argv)
    a.loaders = a.loaders.split(",")
    if a.loaders[0] != "resident" or len(set(a.loaders)) != len(a.loaders) or \
            not set(a.loaders) <= {"resident", "sluice", "torch"}:
        p.error("--loaders: resident first, then any of sluice and torch, each once")
    if a.rounds < 1 or a.block < 1 or a.lead < 1:
        p.error("--rounds, --block and --lead must be at least 1")
    return a


def make_loaders(a, job, batch, steps):
    """{name: (source, iterator)}, every one starting at the same place of the same order."""
    made = {}
    for name in a.loaders:
        if name == "resident":
            source = ResidentBatches(a.data, batch, a.seq, a.seed, job.device, steps=steps)
        elif name == "sluice":
            if job.device.type != "cuda":
                raise SystemExit("the sluice loader feeds a GPU: --device cuda")
            source = SluiceBatches(a.data, batch, a.seq, a.seed, job.device, threads=a.workers)
        else:
            source = TorchBatches(a.data, batch, a.seq, a.seed, job.device, workers=a.workers)
        made[name] = (source, iter(source))
    return made


def rotated(names, k):
    return names[k % len(names):] + names[:k % len(names)]


def main(argv=None):
    a = parse_args(argv)
    job = Job(a.device, a.dist_timeout)
    batch = job.rows(a.global_batch)
    model, optimizer = make_model(a, job)  # the example's model, from the same arguments
    trained = torch.nn.parallel.DistributedDataParallel(model) if job.world > 1 else model
    per_loader = a.rounds * (a.lead + a.block)
    loaders = make_loaders(a, job, batch, per_loader)
    reference = loaders["resident"][0].batches  # (state, x, y) of every index, on the device
    cuda = job.device.type == "cuda"
    step = make_step(job, trained, optimizer)  # the example's step
    job.say(f"gpt_loaders_bench: {', '.join(a.loaders)} in one process, {job.world} rank(s) of {batch} x {a.seq}, "
            f"{a.rounds} rounds of blocks of {a.lead} + {a.block} steps, {job.device.type}")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    served = {name: 0 for name in a.loaders}  # batches each loader has served: the index of its next
    blocks, mismatches = [], 0
    for r in range(a.rounds):
        for name in rotated(a.loaders, r):
            source = loaders[name][1]
            for i in range(a.lead):
                x, y = next(source)
                if i == 0:  # the block's first batch against the resident batch of that index
                    _, rx, ry = reference[served[name]]
                    mismatches += int(not (torch.equal(x.long(), rx.long()) and torch.equal(y.long(), ry.long())))
                step(x, y)
                served[name] += 1
            sync()
            began, waited = time.perf_counter(), 0.0
            for _ in range(a.block):
                asked = time.perf_counter()
                x, y = next(source)
                waited += time.perf_counter() - asked
                loss = step(x, y)
                served[name] += 1
            sync()
            seconds = time.perf_counter() - began
            blocks.append({"round": r, "loader": name, "step_ms": 1e3 * seconds / a.block,
                           "host_waited": waited / seconds, "loss": float(loss)})
    # Every rank's mismatched blocks, summed exactly (an integer count, not a mean).
    counted = torch.tensor([mismatches], dtype=torch.int64, device=job.device)
    if job.world > 1:
        torch.distributed.all_reduce(counted)
    mismatches = int(counted.item())
    result = {"world": job.world, "global_batch": a.global_batch, "seq": a.seq, "rounds": a.rounds,
              "block": a.block, "lead": a.lead, "loaders": a.loaders, "device": str(job.device),
              "mismatched_blocks": mismatches, "blocks": blocks}
    report(job, result)
    if a.json and job.rank == 0:
        pathlib.Path(a.json).write_text(json.dumps(result, indent=1) + "\n")
    del loaders, trained
    job.close()
    if mismatches:
        raise SystemExit(f"{mismatches} block(s), over every rank, began with a batch other than the resident one "
                         f"of that index")
    return 0


def median_interval(values, resamples=2000, seed=0):
    """A 95 % bootstrap interval of the median of `values` (percentiles of the medians of resamples
    drawn with replacement, a fixed seed): how far the paired median could move between runs."""
    draw = random.Random(seed)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def report(job, result):
    """Each loader's blocks: their median and spread, and the median of its pairs with resident, with
    that median's 95 % interval (every block's time is in the JSON)."""
    by = {name: [b for b in result["blocks"] if b["loader"] == name] for name in result["loaders"]}
    resident = {b["round"]: b["step_ms"] for b in by["resident"]}
    job.say(f"{'loader':<10} {'blocks':>6} {'median ms':>9} {'spread ms':>15} {'paired vs resident':>18} "
            f"{'95 % interval':>18} {'host in next()':>14}")
    for name, mine in by.items():
        ms = [b["step_ms"] for b in mine]
        pairs = [b["step_ms"] / resident[b["round"]] - 1 for b in mine]
        paired, interval = "-", "-"
        if name != "resident":
            low, high = median_interval(pairs)
            paired, interval = f"{100 * statistics.median(pairs):+.2f} %", f"{100 * low:+.2f} to {100 * high:+.2f} %"
        waited = statistics.median(b["host_waited"] for b in mine)
        job.say(f"{name:<10} {len(ms):6d} {statistics.median(ms):9.3f} {min(ms):7.3f}-{max(ms):7.3f} {paired:>18} "
                f"{interval:>18} {100 * waited:12.2f} %")
    job.say(f"batches checked: {result['mismatched_blocks']} of {len(result['blocks']) * result['world']} blocks "
            f"(every rank's) began with another batch than the resident one; the times are rank 0's")


if __name__ == "__main__":
    sys.exit(main())
