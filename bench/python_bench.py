#!/usr/bin/env python3
"""sluice from Python against PyTorch, on the same data, in one run.

1. Pageable NumPy arrays through a torch compute step, the same job as the C++
   bench's `copy` workload (y = x, a device-side copy per chunk):
     sluice.Pipeline from Python (staged; and registered, after the first runs)
     PyTorch as a careful user writes it: pin_memory() the arrays, then chunks
       over k streams with non_blocking copies (best k and chunk of a sweep)
     PyTorch naive: .to('cuda'), compute, .cpu()
     the C++ pipeline on the same sizes (`sluice bench --workloads copy`, its staged row)
   Targets: sluice from Python >= 0.95 of the C++ pipeline staged, >= 0.97 of it registered
   (256 MiB), >= 4x PyTorch's pageable path. The C++ figures come from another process
   (`sluice bench --json`), whose calls differ by a few per cent: every row carries its
   spread (IQR, the middle half of its runs) to judge a ratio by.
2. Training batches: sluice.TokenLoader against torch.utils.data.DataLoader on the
   same shards and step cost (bench/torch_loader_peer.py): GPU idle and tokens/s.

Every output is poisoned first and checked against NumPy.

    python3 bench/python_bench.py --sluice-cli build/release/tools/sluice/sluice
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from peer_common import sleep_cycles_per_ms, timed


def quantile(sorted_samples, q):
    """Linear interpolation between closest ranks, as sluice's percentile()."""
    rank = q * (len(sorted_samples) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(sorted_samples) - 1)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (rank - lo)


def spread(sorted_samples):
    """The interquartile range over the median; 0 for fewer than 3 runs."""
    if len(sorted_samples) < 3:
        return 0.0
    return (quantile(sorted_samples, 0.75) - quantile(sorted_samples, 0.25)) / quantile(sorted_samples, 0.5)


def pipeline_rows(sizes, repeats, cli):
    import torch
    import sluice
    rows = []
    for size in sizes:
        n = size // 4
        x = np.random.default_rng(size).random(n, dtype=np.float32)
        out = np.empty_like(x)
        expected = x
        poison = lambda: out.fill(np.nan)

        def check(name, samples):
            ok = bool(np.array_equal(out, expected))
            ms = quantile(samples, 0.5)
            rows.append({"size": size, "method": name, "ms": ms, "spread": spread(samples), "gbps": 2 * size / (ms * 1e6),
                         "verified": ok})
            print(f"  {size >> 20} MiB {name}: {ms:.2f} ms{'' if ok else ' NOT VERIFIED'}", file=sys.stderr)

        # The pipeline holds the arrays it is given, so the automatic policy
        # page-locks them after the first run (the warm-up); replayed, the
        # per-chunk Python call is made once, at capture.
        for policy, replay, label in (("stage", False, "sluice from Python, pageable, staged"),
                                      ("automatic", False, "sluice from Python, pageable, registered"),
                                      ("automatic", True, "sluice from Python, pageable, registered, replayed")):
            p = sluice.Pipeline(host_memory=policy)
            hx, hy = p.input(x), p.output(out)
            p.compute(lambda c: c[hy].copy_(c[hx]), replay=replay)
            # The page-locking before the timed runs, and a replayed pipeline's
            # captures: the first run's, with timing marks to learn its chunks,
            # and the second's without them.
            p.run()
            p.run()
            check(label, sorted(timed(repeats, poison, p.run)))
            del p

        best = None
        for k in (2, 3, 4):
            for chunk_mib in (4, 16, 64):
                chunk = min(n, (chunk_mib << 20) // 4)
                streams = [torch.cuda.Stream() for _ in range(k)]
                bufs = [(torch.empty(chunk, device="cuda"), torch.empty(chunk, device="cuda")) for _ in range(k)]

                def careful():
                    src = torch.from_numpy(x).pin_memory()
                    dst = torch.empty(n).pin_memory()
                    for c, begin in enumerate(range(0, n, chunk)):
                        end = min(n, begin + chunk)
                        s = streams[c % k]
                        d_in, d_out = bufs[c % k]
                        with torch.cuda.stream(s):
                            d_in[:end - begin].copy_(src[begin:end], non_blocking=True)
                            d_out[:end - begin].copy_(d_in[:end - begin])
                            dst[begin:end].copy_(d_out[:end - begin], non_blocking=True)
                    for s in streams:
                        s.synchronize()
                    out[:] = dst.numpy()
                ms = quantile(sorted(timed(repeats, poison, careful)), 0.5)
                if best is None or ms < best[0]:
                    best = (ms, f"PyTorch, pin_memory() then {k} streams, {chunk_mib} MiB chunks (best of sweep)", careful)
        check(best[1], sorted(timed(repeats, poison, best[2])))

        def naive():
            out[:] = torch.from_numpy(x).to("cuda").clone().cpu().numpy()
        check("PyTorch, .to('cuda') (naive)", sorted(timed(repeats, poison, naive)))

        if cli:
            result = subprocess.run([cli, "bench", "--workloads", "copy", "--sizes", str(size), "--repeat", str(repeats),
                                     "--json"], capture_output=True, text=True)
            if result.returncode == 0:
                for row in json.loads(result.stdout)["rows"]:
                    if row["method"] in ("sluice pageable, staged", "sluice pinned",
                                         "sluice pageable, registered by the caller"):
                        rows.append({"size": size, "method": "C++ pipeline (copy workload), " + row["method"][7:],
                                     "ms": row["median_ms"], "spread": row.get("spread", 0.0), "gbps": row["gbps"],
                                     "verified": row["verified"]})
            else:
                print(f"  the C++ bench failed: {result.stderr[-500:]}", file=sys.stderr)
    return rows


def loader_rows(tokens, batch, seq, steps, step_ms, peer):
    import torch
    import sluice
    tmp = tempfile.mkdtemp(prefix="sluice-python-loader-")
    for s in range(4):
        header = np.zeros(256, np.int32)
        header[0], header[1], header[2] = 20240520, 1, tokens // 4
        with open(os.path.join(tmp, f"train_{s}.bin"), "wb") as f:
            f.write(header.tobytes())
            f.write(((np.arange(tokens // 4, dtype=np.int64) * 7 + 1 + s) % 50257).astype(np.uint16).tobytes())
    pattern = os.path.join(tmp, "train_*.bin")
    cycles_per_ms = sleep_cycles_per_ms(torch)
    rows = []
    for step in [0.0] + step_ms:
        loader = sluice.TokenLoader(pattern, batch=batch, seq=seq, shuffle=True, seed=1)
        it = iter(loader)
        n = max(20, min(steps, int(2000 / step))) if step else steps
        x, y = next(it)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            if step:
                torch.cuda._sleep(int(step * cycles_per_ms))
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(loader)
                x, y = next(it)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
        rows.append({"step_ms": step, "method": "sluice.TokenLoader", "tokens_per_s": n * batch * seq / (wall / 1e3),
                     "gpu_idle": max(0.0, 1 - n * step / wall) if step else None,
                     "loader_idle": loader.idle()["idle_fraction"] if step else None})
        del it, loader
    if peer:
        out = os.path.join(tmp, "peer.json")
        subprocess.run([sys.executable, peer, "--pattern", pattern, "--batch", str(batch), "--seq", str(seq), "--steps",
                        str(steps), "--step-ms", ",".join(str(s) for s in step_ms), "--out", out], check=False)
        if os.path.exists(out):
            peer_rows = json.load(open(out))
            for r in peer_rows.get("throughput", []):
                if "best" in r["method"]:
                    rows.append({"step_ms": 0.0, "method": "PyTorch DataLoader, " + r["method"],
                                 "tokens_per_s": r["tokens_per_s"], "gpu_idle": None, "loader_idle": None})
            for r in peer_rows.get("idle", []):
                rows.append({"step_ms": r["step_ms"], "method": "PyTorch DataLoader, " + r["method"],
                             "tokens_per_s": batch * seq / (r["ms_per_step"] / 1e3), "gpu_idle": r["gpu_idle"],
                             "loader_idle": None})
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="268435456,1073741824")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--sluice-cli", default="")
    p.add_argument("--loader-peer", default=os.path.join(os.path.dirname(__file__), "torch_loader_peer.py"))
    p.add_argument("--tokens", type=int, default=256 << 20)
    a = p.parse_args()
    import torch
    import sluice
    if sluice.device_count() == 0 or not torch.cuda.is_available():
        print("python_bench: no CUDA device", file=sys.stderr)
        return 1
    rows = pipeline_rows([int(s) for s in a.sizes.split(",")], a.repeat, a.sluice_cli)
    print(f"{'size':>8}  {'method':<84} {'ms':>8} {'IQR':>6} {'GB/s':>6}  verified")
    for r in rows:
        print(f"{r['size'] >> 20:>5} MiB  {r['method']:<84} {r['ms']:>8.2f} {100 * r['spread']:>5.1f}% {r['gbps']:>6.1f}  "
              f"{'yes' if r['verified'] else 'NO'}")
    print("\nTargets (C++ figures from another process: a ratio within the rows' spreads is level):")
    for size in sorted({r["size"] for r in rows}):
        mine = [r for r in rows if r["size"] == size]

        def ratio(python_method, cpp_method, floor, only_at=None):
            if only_at and size != only_at:
                return
            py = next(r for r in mine if r["method"] == python_method)
            cpp = next((r for r in mine if r["method"] == "C++ pipeline (copy workload), " + cpp_method), None)
            name = f"{size >> 20} MiB, {python_method[len('sluice from Python, '):]}"
            if cpp is None:
                print(f"  [not measured] {name}: no C++ row (--sluice-cli)")
                return
            value = cpp["ms"] / py["ms"]
            met = py["verified"] and cpp["verified"] and value >= floor
            # Level where the gap is within half of each row's spread (the sides that face each other).
            level = abs(value - 1) <= (py["spread"] + cpp["spread"]) / 2
            print(f"  [{'met' if met else 'MISSED'}{', level' if level else ''}] {name}: sluice from Python "
                  f"{py['ms']:.3f} ms (IQR {100 * py['spread']:.1f}%), C++ {cpp['ms']:.3f} ms "
                  f"(IQR {100 * cpp['spread']:.1f}%): {value:.3f} of the C++ pipeline, held to {floor:.2f}")

        ratio("sluice from Python, pageable, staged", "pageable, staged", 0.95)
        ratio("sluice from Python, pageable, registered", "pageable, registered by the caller", 0.97,
              only_at=256 << 20)
        ratio("sluice from Python, pageable, registered, replayed", "pageable, registered by the caller", 0.97,
              only_at=256 << 20)
        py = next(r for r in mine if r["method"] == "sluice from Python, pageable, staged")
        torch_pageable = min(r["ms"] for r in mine if r["method"].startswith("PyTorch"))
        value = torch_pageable / py["ms"]
        print(f"  [{'met' if value >= 4 else 'MISSED'}] {size >> 20} MiB: sluice from Python staged {value:.2f}x "
              f"PyTorch's best pageable path, held to 4x")
    loaders = loader_rows(a.tokens, 64, 1024, 200, [0.2, 1.0, 5.0, 20.0], a.loader_peer)
    print(f"\n{'step ms':>7}  {'loader':<48} {'tokens/s':>10} {'GPU idle':>9} {'loader says':>11}")
    for r in loaders:
        idle = f"{100 * r['gpu_idle']:.2f}%" if r["gpu_idle"] is not None else ""
        own = f"{100 * r['loader_idle']:.2f}%" if r["loader_idle"] is not None else ""
        print(f"{r['step_ms']:>7}  {r['method']:<48} {r['tokens_per_s']:>10.3g} {idle:>9} {own:>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
