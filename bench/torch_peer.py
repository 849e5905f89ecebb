#!/usr/bin/env python3
"""The bench's workloads written as a careful PyTorch user writes them.

`sluice bench --torch-peer bench/torch_peer.py` runs this once for every case
and prints its rows beside sluice's, against the same bound:

  pinned, k streams, C chunks   pinned host tensors, chunks dealt round-robin over
                                k streams, each stream with its own device buffers,
                                copies with non_blocking=True; the best (k, C) of a sweep
  pinned, copy-through          the copy workload as a careful user writes a copy: each
                                chunk copied in and straight back out of one device
                                buffer, no kernel, 4 streams; the best chunk count of a sweep
  pageable, pin_memory() first  the pageable arrays pinned per run, then as above
  pageable, .to('cuda')         the naive whole-array path

Kernels: vadd and copy are one PyTorch op; sincosN is one fused elementwise
kernel made with torch.cuda.jiterator (eager sin/cos/mul would launch 3N
kernels per chunk, which no careful user ships), eager if jiterator fails.
Every run's output is poisoned (NaN) first and checked against NumPy. The
setting a sweep picks is measured again, and that figure is the row's (the
fastest of several noisy medians is flattered by chance); every timed run
goes back to the bench, which works out the spread as for its own rows.
"""
import argparse
import json
import sys

from peer_common import median, timed, torch_or_skip

MiB = 1 << 20


def input_values(n, array):
    import numpy as np
    i = np.arange(n, dtype=np.uint64)
    h = ((i * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)) ^ np.uint64((array * 0x9E3779B9) & 0xFFFFFFFF)
    return (np.float32(0.1) + (h % np.uint64(10007)).astype(np.float32) / np.float32(10007.0)).astype(np.float32)


def parse_workload(name):
    if name in ("vadd", "copy"):
        return name, 0
    if name.startswith("sincos") and name[6:].isdigit():
        return "sincos", int(name[6:])
    raise SystemExit(f"torch_peer: unknown workload {name!r}")


class Kernels:
    def __init__(self, torch):
        self.torch = torch
        self.sincos_fn = None
        self.sincos_kind = "eager"
        try:
            self.sincos_fn = torch.cuda.jiterator._create_jit_fn(
                "template <typename T> T sincos_n(T x, int n) {"
                " for (int k = 0; k < n; ++k) x = sin(x) * cos(x); return x; }", n=0)
            self.sincos_kind = "jiterator"
        except Exception as e:  # private API: fall back to eager ops
            print(f"torch_peer: jiterator unavailable ({e}); eager sin/cos", file=sys.stderr)

    def run(self, kind, n_iter, inputs, out):
        torch = self.torch
        if kind == "copy":
            out.copy_(inputs[0])
        elif kind == "vadd":
            torch.add(inputs[0], inputs[1], out=out)
        elif self.sincos_fn is not None:
            out.copy_(self.sincos_fn(inputs[0], n=n_iter))
        else:
            v = inputs[0].clone()
            for _ in range(n_iter):
                v = torch.sin(v) * torch.cos(v)
            out.copy_(v)


def reference(kind, n_iter, host_inputs, sample):
    import numpy as np
    if kind == "copy":
        return host_inputs[0][sample].astype(np.float64)
    if kind == "vadd":
        return (host_inputs[0][sample] + host_inputs[1][sample]).astype(np.float64)
    v = host_inputs[0][sample].astype(np.float32)
    for _ in range(n_iter):
        v = (np.sin(v.astype(np.float64)).astype(np.float32) * np.cos(v.astype(np.float64)).astype(np.float32))
    return v.astype(np.float64)


def verify(kind, n_iter, host_inputs, out):
    import numpy as np
    out = np.asarray(out)
    if np.isnan(out).any():
        return False, f"element {int(np.argmax(np.isnan(out)))} was never written"
    n = out.shape[0]
    sample = np.arange(n) if kind != "sincos" else np.unique(np.append(np.arange(0, n, max(1, n // 100000)), n - 1))
    expected = reference(kind, n_iter, host_inputs, sample)
    got = out[sample].astype(np.float64)
    tol = 0.0 if kind != "sincos" else 1e-5 + 1e-4 * np.abs(expected)
    bad = np.nonzero(np.abs(got - expected) > tol)[0]
    if bad.size:
        k = int(sample[bad[0]])
        return False, f"element {k} is {out[k]}, expected {expected[bad[0]]}"
    return True, ""


def chunked(torch, kernels, kind, n_iter, host_inputs, host_out, streams, chunk_items, buffers):
    n = host_out.shape[0]
    for c, begin in enumerate(range(0, n, chunk_items)):
        end = min(n, begin + chunk_items)
        k = c % len(streams)
        dev_in, dev_out = buffers[k]
        with torch.cuda.stream(streams[k]):
            ins = []
            for a, h in enumerate(host_inputs):
                d = dev_in[a][: end - begin]
                d.copy_(h[begin:end], non_blocking=True)
                ins.append(d)
            o = dev_out[: end - begin]
            kernels.run(kind, n_iter, ins, o)
            host_out[begin:end].copy_(o, non_blocking=True)
    for s in streams:
        s.synchronize()


def copy_through(torch, host_in, host_out, streams, chunk_items, buffers):
    n = host_out.shape[0]
    for c, begin in enumerate(range(0, n, chunk_items)):
        end = min(n, begin + chunk_items)
        k = c % len(streams)
        with torch.cuda.stream(streams[k]):
            d = buffers[k][: end - begin]
            d.copy_(host_in[begin:end], non_blocking=True)
            host_out[begin:end].copy_(d, non_blocking=True)
    for s in streams:
        s.synchronize()


def rounds_for(size, repeats):
    """Timed runs for arrays of `size` bytes, as the bench's rows get them (bench/noise.hpp)."""
    return repeats * min(8, max(1, (256 * MiB) // size if size else 8))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workloads", required=True)
    p.add_argument("--sizes", required=True, help="bytes per array, comma-separated")
    p.add_argument("--repeat", type=int, default=5, help="timed runs at 256 MiB and above; up to 8x below")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch = torch_or_skip(a.out)
    if torch is None:
        return 0
    import numpy as np
    torch.cuda.set_device(a.device)
    kernels = Kernels(torch)
    rows = []
    for size in [int(s) for s in a.sizes.split(",")]:
        n = size // 4
        for name in a.workloads.split(","):
            kind, n_iter = parse_workload(name)
            inputs = 2 if kind == "vadd" else 1
            repeats = rounds_for(size, a.repeat)
            host_np = [input_values(n, k) for k in range(inputs)]
            pinned_in = [torch.from_numpy(h).pin_memory() for h in host_np]
            pinned_out = torch.empty(n, dtype=torch.float32).pin_memory()
            pageable_out = np.empty(n, dtype=np.float32)
            moved = 4.0 * n * (inputs + 1)

            def row(method, memory, samples, out):
                ok, detail = verify(kind, n_iter, host_np, out)
                med = median(samples)
                rows.append({"workload": name, "bytes": size, "method": method, "memory": memory,
                             "samples_ms": samples, "median_ms": med, "min_ms": min(samples), "max_ms": max(samples),
                             "gbps": moved / (med * 1e6), "verified": bool(ok), "detail": detail})
                print(f"  torch {name} {size >> 20} MiB {method}: {med:.2f} ms, "
                      f"{'verified' if ok else 'NOT VERIFIED: ' + detail}", file=sys.stderr)

            best = None
            for k in (2, 3, 4):
                for chunk_bytes in (4 * MiB, 16 * MiB, 64 * MiB):
                    chunk = max(1, min(n, chunk_bytes // 4))
                    streams = [torch.cuda.Stream() for _ in range(k)]
                    buffers = [([torch.empty(chunk, device="cuda") for _ in range(inputs)],
                                torch.empty(chunk, device="cuda")) for _ in range(k)]
                    s = timed(repeats, lambda: pinned_out.fill_(float("nan")),
                              lambda: chunked(torch, kernels, kind, n_iter, pinned_in, pinned_out, streams, chunk, buffers))
                    if best is None or median(s) < median(best[0]):
                        best = (s, k, chunk_bytes, streams, buffers)
            _, k, chunk_bytes, streams, buffers = best
            chunk = max(1, min(n, chunk_bytes // 4))
            s = timed(repeats, lambda: pinned_out.fill_(float("nan")),
                      lambda: chunked(torch, kernels, kind, n_iter, pinned_in, pinned_out, streams, chunk, buffers))
            row(f"pinned, {k} streams, {chunk_bytes >> 20} MiB chunks (best of sweep)", "pinned", s, pinned_out.numpy())

            if kind == "copy":
                through = None
                through_streams = [torch.cuda.Stream() for _ in range(4)]
                for count in (4, 8, 16, 32, 64, 128):
                    items = max(1, -(-n // count))
                    bufs = [torch.empty(items, device="cuda") for _ in through_streams]
                    s = timed(repeats, lambda: pinned_out.fill_(float("nan")),
                              lambda: copy_through(torch, pinned_in[0], pinned_out, through_streams, items, bufs))
                    if through is None or median(s) < median(through[0]):
                        through = (s, count, items, bufs)
                _, count, items, bufs = through
                s = timed(repeats, lambda: pinned_out.fill_(float("nan")),
                          lambda: copy_through(torch, pinned_in[0], pinned_out, through_streams, items, bufs))
                row(f"pinned, copy-through (no kernel), 4 streams, {count} chunks (best of sweep)", "pinned", s,
                    pinned_out.numpy())
                del through, bufs, through_streams

            page_out = torch.from_numpy(pageable_out)

            def pin_then_chunks():
                pins = [torch.from_numpy(h).pin_memory() for h in host_np]
                out_pin = torch.empty(n, dtype=torch.float32).pin_memory()
                chunked(torch, kernels, kind, n_iter, pins, out_pin, streams, chunk, buffers)
                page_out.copy_(out_pin)
            s = timed(repeats, lambda: pageable_out.fill(np.nan), pin_then_chunks)
            row(f"pageable, pin_memory() then {k} streams", "pageable", s, pageable_out)

            def naive():
                ins = [torch.from_numpy(h).to("cuda") for h in host_np]
                o = torch.empty(n, device="cuda")
                kernels.run(kind, n_iter, ins, o)
                page_out.copy_(o.cpu())
            s = timed(repeats, lambda: pageable_out.fill(np.nan), naive)
            row("pageable, .to('cuda') (naive)", "pageable", s, pageable_out)
            del pinned_in, pinned_out, streams, buffers, best
            torch.cuda.empty_cache()
    json.dump({"rows": rows, "sincos_kernel": kernels.sincos_kind}, open(a.out, "w"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
