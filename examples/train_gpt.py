#!/usr/bin/env python3
"""A small GPT trained on llm.c token shards, the way training jobs run: under
torchrun, on one or many ranks (DDP), with a checkpoint to resume from.

    python examples/train_gpt.py --write-shards data --tokens 50000000 --vocab 4096   # a dataset to try it on
    torchrun --nproc_per_node=1 examples/train_gpt.py --data 'data/train_*.bin' --vocab 4096 --loader sluice
    torchrun --nproc_per_node=4 examples/train_gpt.py ... --checkpoint ckpt.pt --save-every 100
    torchrun --nproc_per_node=2 examples/train_gpt.py ... --checkpoint ckpt.pt --resume     # on fewer ranks

--loader sluice     sluice.TokenLoader: batches on the GPU before the step asks
--loader torch      a torch DataLoader (workers, pin_memory, non_blocking copies) in the same sample order
--loader resident   the same batches, on the GPU before the loop: the step time when loading costs nothing

The data's order is global (seed, epoch, global batch): --global-batch rows are
cut into one slice per rank, so a checkpoint resumes on any number of ranks
that divides the global batch, with the samples the job had not yet seen.
Prints loss, step time, tokens/s, how long the GPU waited for data, how long
the launching thread waited in next() for a batch, and how busy each of the
process's threads was (a core's share); --json writes them (rank 0).
"""
import argparse
import contextlib
import datetime
import gc
import json
import os
import pathlib
import sys
import threading
import time

import torch
import torch.distributed as dist

from batches import ResidentBatches, SluiceBatches, TorchBatches, write_shards
from gpt import GPT


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="llm.c token shards (a glob pattern)")
    p.add_argument("--write-shards", metavar="DIR", help="write a synthetic dataset of uint16 shards to DIR, then stop")
    p.add_argument("--tokens", type=int, default=50_000_000, help="tokens of the synthetic dataset")
    p.add_argument("--loader", choices=["sluice", "torch", "resident"], default="sluice")
    p.add_argument("--workers", type=int,
                   help="DataLoader workers (--loader torch; default 4), reader threads (--loader sluice; default: one "
                        "per hardware thread)")
    p.add_argument("--global-batch", type=int, default=16, help="rows a step, all ranks together")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50304, help="embedding rows: more than the largest token")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--steps", type=int, default=200, help="the job's steps, those before a resume included")
    p.add_argument("--warmup", type=int, default=10, help="steps left out of the timing")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dist-timeout", type=float, default=1800, metavar="SECONDS",
                   help="how long a rank waits for the others (rendezvous, collectives) before it fails")
    p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda where there is one")
    p.add_argument("--checkpoint", help="where the checkpoint is saved (rank 0) and resumed from")
    p.add_argument("--save-every", type=int, default=0, help="steps between checkpoints (and always at the end)")
    p.add_argument("--resume", action="store_true", help="go on from --checkpoint if it exists")
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--log-samples", metavar="DIR", help="each rank writes the windows of every step to DIR/rank<r>.jsonl")
    p.add_argument("--json", metavar="FILE", help="the run's figures (rank 0)")
    p.add_argument("--pin-launcher", action="store_true",
                   help="from the first timed step, keep this thread (it launches the step) on a core of its own, one "
                        "a rank, and this process's other threads on the cores no rank's launcher has (Linux); threads "
                        "started later from this one share its core, and a DataLoader's worker processes stay where "
                        "they are")
    return p.parse_args(argv)


class Job:
    """This process's rank, the world and the device, from what torchrun sets."""

    def __init__(self, device_kind, timeout_s):
        self.rank, self.world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        kind = device_kind or ("cuda" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(kind, int(os.environ.get("LOCAL_RANK", 0))) if kind == "cuda" else torch.device("cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if self.world > 1:
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo",
                                    timeout=datetime.timedelta(seconds=timeout_s))

    def rows(self, global_batch):
        """This rank's rows of each global batch, which the ranks split evenly."""
        if global_batch % self.world:
            raise SystemExit(f"a global batch of {global_batch} rows does not divide over {self.world} ranks")
        return global_batch // self.world

    def mean(self, tensor):
        if self.world > 1:
            dist.all_reduce(tensor)
            tensor /= self.world
        return tensor

    def say(self, *text):
        if self.rank == 0:
            print(*text, flush=True)

    def close(self):
        """Takes the process group down once every rank is done with it; the DDP wrapper must be gone.

        DDP's reducer holds the process group. Were it the last holder, gloo's destructor would join
        its worker threads with the GIL held, while a worker that has just finished a collective may
        be waiting for the GIL to free a tensor Python gave up: the rank hangs at exit. Taken down by
        destroy_process_group, the group is destroyed with the GIL released."""
        if self.world > 1:
            gc.collect()  # a wrapper kept only by a reference cycle goes now, not after the group
            dist.barrier()  # every rank done with the process group before any takes it down
            dist.destroy_process_group()


def thread_cpu():
    """CPU seconds each of this process's threads has used, keyed by (thread id, name); empty where
    /proc cannot say (not Linux). sluice names its threads (sluice-ring, sluice-stage, ...)."""
    seconds = {}
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for task in pathlib.Path("/proc/self/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        seconds[(task.name, name)] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return seconds


def busy_threads(before, after, seconds):
    """Each thread name's share of a core over `seconds` of the loop, the busiest first."""
    by_name = {}
    for key, cpu in after.items():
        by_name[key[1]] = by_name.get(key[1], 0.0) + cpu - before.get(key, 0.0)
    shares = ((n, round(c / seconds, 3)) for n, c in by_name.items())
    return dict(sorted(((n, s) for n, s in shares if s > 0), key=lambda t: -t[1]))  # a share that rounds to 0: not busy


def pin_launcher():
    """This thread on a core of its own (the last cores, one a rank of the node, by LOCAL_RANK); every
    other thread of the process on the cores no rank's launcher has."""
    cores = sorted(os.sched_getaffinity(0))
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if len(cores) < ranks + 1:
        return None
    own = cores[-1 - int(os.environ.get("LOCAL_RANK", 0)) % ranks]
    rest = set(cores[:-ranks])
    me = str(threading.get_native_id())
    for task in pathlib.Path("/proc/self/task").glob("*"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task.name), {own} if task.name == me else rest)
    return own


def make_model(a, job):
    """The GPT of the arguments on the job's device, the same on every rank (one seed), and its optimizer."""
    torch.manual_seed(a.seed)
    model = GPT(a.vocab, a.seq, a.layers, a.heads, a.width).to(job.device)
    return model, torch.optim.AdamW(model.parameters(), lr=a.lr)


def make_step(job, trained, optimizer):
    """One training step on a batch, in bf16 autocast where the GPU has it; the step returns the loss."""
    bf16 = job.device.type == "cuda" and torch.cuda.is_bf16_supported()
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    def step(x, y):
        with autocast():
            loss = trained(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss
    return step


def make_batches(a, job, batch, state, steps):
    kind = {"sluice": SluiceBatches, "torch": TorchBatches, "resident": ResidentBatches}[a.loader]
    extra = {"torch": {"workers": 4 if a.workers is None else a.workers}, "sluice": {"threads": a.workers or 0},
             "resident": {"steps": steps}}.get(a.loader, {})
    if a.loader == "sluice" and job.device.type != "cuda":
        raise SystemExit("--loader sluice feeds a GPU: use --device cuda, or --loader torch on the CPU")
    return kind(a.data, batch, a.seq, a.seed, job.device, state, **extra)


def save(path, model, optimizer, step, batches):
    """Written beside the target and renamed over it: a crash mid-write leaves the last checkpoint whole."""
    partial = pathlib.Path(str(path) + ".partial")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "data": batches.state_dict()}, partial)
    os.replace(partial, path)


def main(argv=None):
    a = parse_args(argv)
    if a.write_shards:
        print(write_shards(a.write_shards, a.tokens, min(a.vocab, 65536)))
        return 0
    if not a.data:
        raise SystemExit("--data is needed (or --write-shards DIR to make a dataset)")
    job = Job(a.device, a.dist_timeout)
    batch = job.rows(a.global_batch)
    model, optimizer = make_model(a, job)
    step, data_state = 0, None
    if a.resume and a.checkpoint and os.path.exists(a.checkpoint):
        saved = torch.load(a.checkpoint, map_location=job.device)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step, data_state = saved["step"], saved["data"]
        job.say(f"resumed at step {step} from {a.checkpoint} (data: epoch {data_state['epoch']}, "
                f"sample {data_state['sample']}, saved with a global batch of {data_state['global_batch']})")
    trained = torch.nn.parallel.DistributedDataParallel(model) if job.world > 1 else model
    todo = max(0, a.steps - step)
    batches = make_batches(a, job, batch, data_state, todo)
    parameters = sum(p.numel() for p in model.parameters())
    job.say(f"train_gpt: --loader {a.loader}, {job.world} rank(s) of {batch} x {a.seq} tokens, {a.layers} layers x "
            f"{a.width} wide ({parameters / 1e6:.1f}M parameters), {job.device.type}, steps {step}..{a.steps}")

    cuda = job.device.type == "cuda"
    train_step = make_step(job, trained, optimizer)
    samples = None
    if a.log_samples:
        pathlib.Path(a.log_samples).mkdir(parents=True, exist_ok=True)
        samples = open(pathlib.Path(a.log_samples) / f"rank{job.rank}.jsonl", "a")
    losses = torch.zeros(todo, device=job.device)
    waits = []  # (before the batch, after it) on the step's stream: how long the GPU waited for data
    timed_from = min(a.warmup, todo)
    began = None
    host_waited = 0.0  # seconds this thread spent in next() over the timed steps: time the step could not launch
    source = iter(batches)
    for i in range(todo):
        if i == timed_from:
            if cuda:
                torch.cuda.synchronize()
            if a.pin_launcher:
                core = pin_launcher()
                job.say(f"the launching thread on core {core}, the others off it" if core is not None else
                        "--pin-launcher: too few cores for a launcher's own, nothing pinned")
            began = time.perf_counter()
            cpu_began = thread_cpu()
        at = batches.plan_state() if samples else None  # asked only to log: sluice's is a call into the loader
        if cuda and i >= timed_from:
            before = torch.cuda.Event(enable_timing=True)
            before.record()
        asked = time.perf_counter()
        x, y = next(source)
        if i >= timed_from:
            host_waited += time.perf_counter() - asked
            if cuda:
                after = torch.cuda.Event(enable_timing=True)
                after.record()
                waits.append((before, after))
        loss = train_step(x, y)
        losses[i] = loss.detach()
        step += 1
        if samples:
            samples.write(json.dumps({"step": step - 1, "items": batches.plan.batch_items(at)}) + "\n")
        if a.log_every and step % a.log_every == 0:
            job.say(f"step {step:6d}  loss {losses[i].item():.4f}")
        if a.checkpoint and a.save_every and step % a.save_every == 0 and job.rank == 0:
            save(a.checkpoint, model, optimizer, step, batches)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - began if began is not None else 0.0
    threads = busy_threads(cpu_began, thread_cpu(), seconds) if began is not None and seconds else {}
    if samples:
        samples.close()
    if a.checkpoint and job.rank == 0 and todo > 0:
        save(a.checkpoint, model, optimizer, step, batches)
    losses = job.mean(losses).tolist()  # every rank's rows: the job's loss
    timed = todo - timed_from
    waited_ms = sum(b.elapsed_time(e) for b, e in waits)
    result = {"loader": a.loader, "world": job.world, "global_batch": a.global_batch, "seq": a.seq,
              "parameters": parameters, "device": str(job.device), "first_step": a.steps - todo, "steps": a.steps,
              "timed_steps": timed, "step_ms": 1e3 * seconds / timed if timed else None,
              "tokens_per_s": timed * a.global_batch * a.seq / seconds if timed and seconds else None,
              "gpu_idle": waited_ms / (1e3 * seconds) if cuda and seconds else None,
              "loader_idle": batches.idle(), "host_waited": host_waited / seconds if seconds else None,
              "threads": threads, "losses": losses}
    if timed:
        idle = f"{100 * result['gpu_idle']:.2f} %" if result["gpu_idle"] is not None else "n/a (cpu)"
        own = f", the loader's own measure {100 * result['loader_idle']:.2f} %" if result["loader_idle"] is not None else ""
        job.say(f"done: {timed} timed steps, {result['step_ms']:.3f} ms a step, {result['tokens_per_s']:.4g} tokens/s, "
                f"GPU waiting for data {idle} of the loop{own}, this thread in next() "
                f"{100 * result['host_waited']:.2f} %; loss {losses[0]:.4f} -> {losses[-1]:.4f}")
        busiest = ", ".join(f"{n} {c:.2f}" for n, c in list(threads.items())[:6])
        job.say(f"this process's threads busy (cores): {busiest}")
    if a.json and job.rank == 0:
        pathlib.Path(a.json).write_text(json.dumps(result, indent=1) + "\n")
    del trained  # DDP's reducer lets go of the process group before the group goes: see Job.close
    job.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
