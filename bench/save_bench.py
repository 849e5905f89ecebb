#!/usr/bin/env python3
"""sluice.save_file beside what PyTorch users run to save weights off the GPU, in one process.

  A  bf16 CUDA tensors (3 GiB in 24 tensors; --quick: 1 GiB) saved by sluice.save_file, by a
     hand-written loop of copies on a torch side stream into three pinned buffers written by four
     threads (the same file sink and header: only the copies and their waits differ),
     safetensors.torch.save_file and torch.save, each file then synced (os.fsync) so that every
     row ends with the bytes on disk, as sluice's own does (it syncs, renames over the target and
     syncs the directory). Beside each row, the bound: min(D2H link, file system write rate), both
     measured in this run: pinned D2H copies of 256 MiB (best of 5), and the file's bytes written
     from a page-locked buffer by 4 or 8 threads into reserved blocks, then fsync (best of 4). Every file is read back
     (safetensors' loader, not sluice's, or torch.load) and compared bitwise on the GPU.
  B  a training loop (an MLP of Linear(8192, 8192) bf16 layers, 128 MiB each: 32 layers, 4 GiB of
     weights, by default; --quick: 8, 1 GiB; SGD) with a background save of its weights in flight: the step time while the save runs
     beside the step time without one (target: at most 5 % slower); the saved file is compared
     with a copy of the weights taken at the call.

  python3 bench/save_bench.py [--quick] [--layers 32] [--dir .] [--out save.json]

Files go to --dir (the file system measured) and are removed at the end.
"""
import argparse
import json
import os
import statistics
import threading
import time

from peer_common import cuda_torch, pinned_copy_gbps

MiB = 1 << 20
GB = 1e9


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="1 GiB, fewer steps")
    p.add_argument("--layers", type=int, default=None, help="B's layers of 128 MiB (default 32: 4 GiB; --quick: 8)")
    p.add_argument("--dir", default=".", help="where the files are written (and removed)")
    p.add_argument("--out", default=None, help="the rows as JSON")
    a = p.parse_args()
    torch, why = cuda_torch()
    if torch is None:
        print(f"skipped: {why}")
        return 0
    import sluice
    torch.manual_seed(0)
    rows = workload_a(torch, sluice, a.dir, gib=1 if a.quick else 3)
    train = workload_b(torch, sluice, a.dir, layers=a.layers or (8 if a.quick else 32), steps=30 if a.quick else 60)
    print()
    print(f"{'A: save bf16 CUDA tensors':40} {'ms':>9} {'GB/s':>7} {'bound ms':>9} {'effic.':>7}  check")
    for r in rows:
        if r.get("ms") is None:
            print(f"{r['method']:40} {'n/a':>9}  {r['error']}")
            continue
        print(f"{r['method']:40} {r['ms']:9.1f} {r['gbps']:7.2f} {r['bound_ms']:9.1f} {r['efficiency']:7.2f}  {r['check']}")
    print(f"B: training steps {train['step_ms']:.1f} ms alone, {train['step_ms_saving']:.1f} ms with a background save "
          f"in flight ({train['slowdown_pct']:+.1f} %, target <= 5 %); save_file returned in {train['call_ms']:.2f} ms, "
          f"the save took {train['save_ms']:.0f} ms for {train['bytes'] / GB:.2f} GB; file {train['check']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"save": rows, "training": train}, f, indent=1)
    return 0


def d2h_gbps(torch):
    """The best of 5 pinned D2H copies of 256 MiB."""
    on = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
    host = torch.empty(256 * MiB, dtype=torch.uint8, pin_memory=True)
    return pinned_copy_gbps(torch, host, on, to_device=False, repeats=5), host


def write_gbps(path, total, pinned, piece=64 * MiB):
    """`total` bytes written from a page-locked buffer into a file whose blocks are reserved first (as
    sluice's file sink reserves them), then fsync: the best of 4 and 8 threads, twice each."""
    assert piece <= pinned.numel()
    view = memoryview(pinned.numpy())
    best = 0.0
    for threads in (4, 8, 4, 8):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.posix_fallocate(fd, 0, total)
        offsets = iter(range(0, total, piece))
        lock = threading.Lock()

        def writer():
            while True:
                with lock:
                    at = next(offsets, None)
                if at is None:
                    return
                n, done = min(piece, total - at), 0
                while done < n:  # os.pwrite releases the GIL; the same buffer serves every piece
                    done += os.pwrite(fd, view[done:n], at + done)

        t0 = time.perf_counter()
        pool = [threading.Thread(target=writer) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        os.fsync(fd)
        seconds = time.perf_counter() - t0
        os.close(fd)
        os.unlink(path)
        best = max(best, total / GB / seconds)
    return best


def same(torch, a, b):
    """Bitwise (NaNs included), dtype and shape."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8),
                                                                      b.reshape(-1).view(torch.uint8))


def fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def workload_a(torch, sluice, directory, gib):
    count = 24 if gib >= 3 else 8
    each = gib * (1 << 30) // count // 2  # bf16 elements per tensor
    tensors = {f"layers.{i}.weight": torch.randn(each // 4096, 4096, device="cuda").to(torch.bfloat16)
               for i in range(count)}
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    link, pinned = d2h_gbps(torch)
    disk = write_gbps(os.path.join(directory, "save_bench_rate.bin"), total, pinned)
    bound_gbps = min(link, disk)
    bound_ms = total / GB / bound_gbps * 1e3
    print(f"A: {count} bf16 tensors, {total / GB:.2f} GB; D2H {link:.1f} GB/s, file system write + fsync "
          f"{disk:.2f} GB/s: bound {bound_ms:.0f} ms", flush=True)
    path = os.path.join(directory, "save_bench.safetensors")
    methods = [("sluice.save_file", lambda: sluice.save_file(tensors, path)),
               ("torch-stream loop, same file sink", lambda: stream_loop_save(torch, sluice, tensors, path))]
    try:
        import safetensors.torch as st
        methods.append(("safetensors.torch.save_file + fsync", lambda: (st.save_file(tensors, path), fsync_file(path))))
    except ImportError as e:
        methods.append(("safetensors.torch.save_file + fsync", e))
    methods.append(("torch.save + fsync", lambda: (torch.save(tensors, path), fsync_file(path))))
    rows = []
    for name, run in methods:
        row = {"method": name, "bytes": total, "bound_ms": bound_ms, "d2h_gbps": link, "disk_gbps": disk}
        rows.append(row)
        if isinstance(run, Exception):
            row.update(ms=None, error=f"not installed: {run}")
            continue
        samples = []
        for _ in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            run()
            samples.append((time.perf_counter() - t0) * 1e3)
            check = verify(torch, sluice, path, tensors, name.startswith("torch.save"))
            os.unlink(path)
        row.update(ms=min(samples), samples_ms=samples, check=check)
        row["gbps"] = total / GB / (row["ms"] / 1e3)
        row["efficiency"] = bound_ms / row["ms"]
        print(f"  {name}: {row['ms']:.0f} ms (runs {', '.join(f'{s:.0f}' for s in samples)}), {check}", flush=True)
    return rows


def stream_loop_save(torch, sluice, tensors, path, chunk_bytes=64 * MiB, staging=3, threads=4):
    """What a careful PyTorch user writes (and what sluice.save_file ran before its ring to the
    host): chunks copied off the GPU on a side stream into `staging` pinned buffers, each written
    by `threads` threads once its event is done, while the next chunk is copied; into the same
    durable file sink, with the same header, so that only the copies and their waits differ."""
    from concurrent.futures import ThreadPoolExecutor
    from sluice.checkpoint_save import _plan
    header, entries, total = _plan(torch, tensors, None, path)
    sink = sluice._sluice._FileSink(path, total)
    sink.begin()
    sink.write(0, header)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    buffers = [torch.empty(chunk_bytes, dtype=torch.uint8, pin_memory=True) for _ in range(staging)]
    in_flight = [[] for _ in buffers]
    chunks, parts, used = [], [], 0
    for _, t, begin, end in entries:
        at = 0
        while at < end - begin:
            if used == chunk_bytes:
                chunks.append(parts)
                parts, used = [], 0
            n = min(end - begin - at, chunk_bytes - used)
            parts.append((t, at, n, begin + at, used))
            at, used = at + n, used + n
    chunks.append(parts)
    with ThreadPoolExecutor(threads) as pool:
        for i, parts in enumerate(chunks):
            slot = i % staging
            for f in in_flight[slot]:
                f.result()
            buffer = buffers[slot]
            with torch.cuda.stream(stream):
                for t, at, n, _, to in parts:
                    buffer[to:to + n].copy_(t.reshape(-1).view(torch.uint8)[at:at + n], non_blocking=True)
                event = torch.cuda.Event(blocking=True)
                event.record(stream)
            n = sum(p[2] for p in parts)
            step = -(-n // threads)

            def write(at, length, offset=parts[0][3], address=buffer.data_ptr(), event=event):
                event.synchronize()
                sink.write(offset + at, address + at, length)
            in_flight[slot] = [pool.submit(write, at, min(step, n - at)) for at in range(0, n, step)]
        for writes in in_flight:
            for f in writes:
                f.result()
    sink.commit()


def verify_load(path):
    import safetensors.torch as st
    return {k: v.cuda() for k, v in st.load_file(path, device="cpu").items()}


def verify(torch, sluice, path, want, pickled):
    # Read back by a loader not sluice's own (safetensors', onto the host), so that the check
    # does not rest on the code it checks.
    if pickled:
        got = torch.load(path, map_location="cuda")
    else:
        got = verify_load(path)
    if set(got) != set(want):
        return "DIFFERENT names"
    bad = [k for k in want if not same(torch, got[k], want[k])]
    return "bitwise" if not bad else f"DIFFERENT: {', '.join(bad[:3])}"


def workload_b(torch, sluice, directory, layers, steps):
    width, batch = 8192, 4096
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]).cuda().to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device="cuda", dtype=torch.bfloat16)
    weights = {name: p.data for name, p in model.named_parameters()}
    total = sum(t.numel() * t.element_size() for t in weights.values())
    path = os.path.join(directory, "save_bench_train.safetensors")

    def step():
        t0 = time.perf_counter()
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    for _ in range(5):
        step()  # warm-up
    alone, saving, calls, saves, checks = [], [], [], [], []
    for _ in range(3):  # save rounds, each between steps without a save
        alone += [step() for _ in range(steps // 3)]
        want = {k: v.clone() for k, v in weights.items()}  # the weights at the call, for the check
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        handle = sluice.save_file(weights, path, background=True)
        calls.append((time.perf_counter() - t0) * 1e3)
        while not handle.done():
            saving.append(step())  # each step changes the weights in place
        handle.wait()
        saves.append((time.perf_counter() - t0) * 1e3)
        got = verify_load(path)
        checks.append(all(same(torch, got[k], want[k]) for k in want) and set(got) == set(want))
        del got, want
        os.unlink(path)
    alone += [step() for _ in range(steps // 3)]
    step_ms, step_saving = statistics.median(alone), statistics.mean(saving) if saving else float("nan")
    print(f"B: {layers} layers, {total / GB:.2f} GB of bf16 weights; {len(saving)} steps with a save in flight", flush=True)
    return {"bytes": total, "step_ms": step_ms, "step_ms_saving": step_saving, "steps_saving": len(saving),
            "slowdown_pct": (step_saving / step_ms - 1) * 100, "call_ms": statistics.median(calls),
            "save_ms": statistics.median(saves), "check": "equals the weights at the call" if all(checks) else "DIFFERENT"}


if __name__ == "__main__":
    raise SystemExit(main())
