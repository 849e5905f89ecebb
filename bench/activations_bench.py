#!/usr/bin/env python3
"""sluice.OffloadActivations beside a training step without offload and torch's save_on_cpu, in one process.

The GPT of examples/gpt.py (width 2048, 8 layers, 16 heads, seq 1024, vocab 8192, batch 8,
bf16 autocast as examples/train_gpt.py runs it; --quick: 4 layers, batch 4), one training step
(forward, backward; no optimizer, whose time is the same in every row) from the same weights and
inputs in every row. Rows: no offload (the reference gradients and the compute time);
torch.autograd.graph.save_on_cpu(pin_memory=True); sluice.OffloadActivations at min_bytes 1 MiB and
16 MiB (the smaller tensors stay). Columns: step ms (median of --repeats after a warm-up), the peak
of device memory above the resident model (torch.cuda.max_memory_allocated), slower than no offload,
the bytes copied each way in a step, and the link's time for them at its best (pinned 256 MiB copies
measured in this run, each direction on its own copy engine): the copies can hide behind the
compute only when that time is below the step's, so the bound is max(compute, D2H / link,
H2D / link). "grads" compares every row's gradients with no offload's after one step (bitwise,
or the largest difference); each step starts with the gradients set to None.

  python3 bench/activations_bench.py [--quick] [--repeats 10] [--fp32] [--out activations.json]
"""
import argparse
import contextlib
import json
import pathlib
import sys

from peer_common import cuda_torch, pinned_copy_gbps, timed_with_peak

MB = 1e6
MiB = 1 << 20


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="4 layers, batch 4, fewer repeats")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--fp32", action="store_true", help="no autocast (float32 throughout)")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    torch, why = cuda_torch()
    if torch is None:
        print(f"skipped: {why}")
        return 0
    import sluice
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
    from gpt import GPT
    repeats = 3 if a.quick else a.repeats
    layers, batch = (4, 4) if a.quick else (a.layers, a.batch)
    seq, vocab, heads = 1024, 8192, 16
    dev = torch.device("cuda", 0)
    d2h, h2d = link_gbps(torch, dev)
    print(f"link: pinned D2H {d2h:.1f} GB/s, H2D {h2d:.1f} GB/s (best of 256 MiB copies)", flush=True)

    torch.manual_seed(0)
    model = GPT(vocab, seq, layers, heads, a.width).to(dev)
    g = torch.Generator(device=dev).manual_seed(1)
    inputs = torch.randint(0, vocab, (batch, seq), device=dev, generator=g)
    targets = torch.randint(0, vocab, (batch, seq), device=dev, generator=g)
    autocast = contextlib.nullcontext if a.fp32 else lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    print(f"GPT width {a.width}, {layers} layers, seq {seq}, batch {batch}, "
          f"{'fp32' if a.fp32 else 'bf16 autocast'}", flush=True)

    def step(wrap):
        model.zero_grad(set_to_none=True)
        with wrap(), autocast():
            loss = model(inputs, targets)
        loss.backward()
        return loss

    methods = [("no offload", contextlib.nullcontext, None)]
    methods.append(("torch save_on_cpu(pin_memory=True)",
                    lambda: torch.autograd.graph.save_on_cpu(pin_memory=True), None))
    # The default waits for the copies out past 2 x ahead tensors in flight; outgoing=None never does
    # (faster where the link is the bottleneck, at a peak that depends on how far the host runs ahead).
    for min_mb, outgoing, label in ((1, "2 x ahead", ""), (16, "2 x ahead", ""), (1, None, ", outgoing=None")):
        offload = sluice.OffloadActivations(min_bytes=min_mb * MiB, outgoing=outgoing, device=dev)
        methods.append((f"sluice.OffloadActivations(min {min_mb} MiB{label})", lambda o=offload: o, offload))

    rows, want, floor = [], None, None
    for method, wrap, offload in methods:
        try:
            loss = step(wrap)
            got = [q.grad.clone() for q in model.parameters()]
            if want is None:
                want = got
                # The floor: the same step again with no offload (kernels that reduce in a
                # varying order differ from run to run; then no method can be bitwise).
                step(wrap)
                floor = check(torch, [q.grad.clone() for q in model.parameters()], want)
                print(f"  no offload, run to run: {floor}", flush=True)
            verdict = check(torch, got, want)
            moved = moved_bytes(torch, model, inputs, targets, autocast, method, offload, dev)
            del got, loss
            # The base holds no gradients: the peak counts them and the activations.
            ms, peak = timed_with_peak(torch, lambda: step(wrap), repeats,
                                       settle=lambda: model.zero_grad(set_to_none=True))
            r = {"method": method, "ms": ms, "peak_bytes": peak, "d2h_bytes": moved, "h2d_bytes": moved,
                 "grads": verdict}
            if offload is not None:
                r["report"] = vars(offload.last_step)
                r["h2d_bytes"] = offload.last_step.fetched_bytes
                r["d2h_bytes"] = offload.last_step.offloaded_bytes
        except Exception as e:  # noqa: BLE001 - the row says why, the others run
            r = {"method": method, "ms": None, "error": f"{type(e).__name__}: {e}"[:160]}
        rows.append(r)
        print(f"  {method:52} " + (f"{r['ms']:8.1f} ms  {r['grads']}" if r["ms"] else r["error"]), flush=True)
        torch.cuda.empty_cache()

    compute = rows[0]["ms"]
    print()
    print(f"{'method':52} {'step ms':>8} {'peak MB':>8} {'slower':>8} {'D2H MB':>8} {'H2D MB':>8} "
          f"{'link ms':>8} {'bound ms':>9}  grads")
    for r in rows:
        if r.get("ms") is None:
            print(f"{r['method']:52} {'n/a':>8}  {r['error']}")
            continue
        offloaded = r["method"] != "no offload"
        link_ms = (r["d2h_bytes"] / MB / d2h + r["h2d_bytes"] / MB / h2d) if offloaded else 0.0
        r["link_ms"] = link_ms
        r["bound_ms"] = max(compute, r["d2h_bytes"] / MB / d2h, r["h2d_bytes"] / MB / h2d)
        r["slower_pct"] = 100 * (r["ms"] / compute - 1)
        d2h_mb = f"{r['d2h_bytes'] / MB:8.0f}" if offloaded else f"{'-':>8}"
        h2d_mb = f"{r['h2d_bytes'] / MB:8.0f}" if offloaded else f"{'-':>8}"
        print(f"{r['method']:52} {r['ms']:8.1f} {r['peak_bytes'] / MB:8.0f} {r['slower_pct']:+7.1f}% "
              f"{d2h_mb} {h2d_mb} {link_ms:8.1f} {r['bound_ms']:9.1f}  {r['grads']}")
    print(f"(the copies can hide behind the compute where link ms < the no-offload step, {compute:.1f} ms)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"d2h_gbps": d2h, "h2d_gbps": h2d, "width": a.width, "layers": layers, "batch": batch,
                       "seq": seq, "bf16": not a.fp32, "no_offload_run_to_run": floor, "rows": rows}, f, indent=1)
    return 0


def link_gbps(torch, dev):
    host = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
    on = torch.empty_like(host, device=dev)
    return (pinned_copy_gbps(torch, host, on, to_device=False, repeats=6),
            pinned_copy_gbps(torch, host, on, to_device=True, repeats=6))


def check(torch, got, want):
    if all(torch.equal(x, y) for x, y in zip(got, want)):
        return "bitwise"
    return f"max |diff| {max(float((x.float() - y.float()).abs().max()) for x, y in zip(got, want)):.3g}"


def moved_bytes(torch, model, inputs, targets, autocast, method, offload, dev):
    """Bytes a row copies to the host in one step: sluice's report; for save_on_cpu every CUDA
    tensor saved (it copies them all, the weights included), counted by hooks of the same kind."""
    if method == "no offload" or offload is not None:
        return 0 if offload is None else offload.last_step.offloaded_bytes
    total = [0]

    def pack(t):
        if t.is_cuda:
            total[0] += t.numel() * t.element_size()
        return t

    model.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast():
        loss = model(inputs, targets)
    del loss
    return total[0]


if __name__ == "__main__":
    sys.exit(main())
