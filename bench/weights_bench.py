#!/usr/bin/env python3
"""sluice.StreamedLayers beside what PyTorch users run, in one process, rows side by side.

A model's blocks with their weights on the host, streamed onto the GPU for each forward:
  A  16 MLP blocks (Linear 4096 -> 16384 -> 4096, GELU, bf16: 4.3 GB of weights), a batch of 8;
  B  a transformers LlamaForCausalLM (8 layers, hidden 4096, intermediate 11008, 32 heads, random
     bf16 weights), its decoder layers streamed and the rest resident, one forward of 1 x 128 tokens.
Rows: the model resident (the reference output and the compute time); sluice.StreamedLayers
within a device budget; an expert's hand-written loop (page-locked weights, a copy stream one
block ahead, two device slots, events); each block's weights .to('cuda') from pageable memory;
accelerate.cpu_offload, and for B accelerate's device_map from infer_auto_device_map with the
same budget (where accelerate is installed).

Every row's output is checked against the resident output (bitwise, or the largest difference)
before it is timed. The bound is max(streamed bytes / link, resident forward), the link being
the best pinned H2D rate measured in this run (256 MiB torch copies, and sluice's probe).

Training rows (workload "A mlp train", "B llama train"): a step's forward and backward of the
loss mean(output^2), the model resident (weights and gradients on the GPU) and with its blocks
streamed (the gradients to page-locked host .grad), each step's gradients set to none after it;
the streamed row's gradients checked against the resident's (bitwise, or the largest
difference) before it is timed. A second streamed row keeps the gradients on the GPU
(grads="device") and copies them to .grad once (grads_to_host()) after each backward, and
after every four (accumulation over micro-batches; its ms is a backward's): its device MB
holds them. Its bound is max(2 x streamed bytes / H2D, gradient bytes /
D2H, resident step): each copy engine and the compute alone, the D2H rate measured as the H2D
one (torch's 256 MiB copies). The
optimizer step is a row of its own: torch.optim.SGD over the streamed blocks' host parameters,
on the CPU. No hand-written peer for training: an expert's loop over the backward (tokens for the
saved weights, a reverse ring, gradients copied out) is what StreamedLayers is.

  python3 bench/weights_bench.py [--quick] [--repeats 10] [--out weights.json]
"""
import argparse
import copy
import json
import sys
import time

from peer_common import cuda_torch, pinned_copy_gbps, timed_with_peak

MB = 1e6
ALIGN = 256


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="fewer repeats, workload B with 4 layers")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", default=None)
    p.add_argument("--workloads", default="A,B")
    a = p.parse_args()
    torch, why = cuda_torch()
    if torch is None:
        print(f"skipped: {why}")
        return 0
    import sluice
    repeats = 3 if a.quick else a.repeats
    dev = torch.device("cuda", 0)
    link = link_gbps(torch, sluice, dev)
    d2h = d2h_gbps(torch, dev)
    print(f"link: pinned H2D {link:.1f} GB/s (best of torch's 256 MiB copies and sluice's probe), "
          f"D2H {d2h:.1f} GB/s", flush=True)
    rows = []
    if "A" in a.workloads:
        rows += workload_a(torch, sluice, dev, (link, d2h), repeats)
    if "B" in a.workloads:
        rows += workload_b(torch, sluice, dev, (link, d2h), repeats, layers=4 if a.quick else 8)
    print()
    print(f"{'workload':13} {'method':44} {'ms':>8} {'bound ms':>9} {'effic.':>7} {'x accel.':>8} "
          f"{'device MB':>10}  output")
    for r in rows:
        accel = next((q["ms"] for q in rows if q["workload"] == r["workload"] and q["method"] == "accelerate.cpu_offload"
                      and q.get("ms")), None)
        if r.get("ms") is None:
            print(f"{r['workload']:13} {r['method']:44} {'n/a':>8}  {r['error']}")
            continue
        # The bound is the streamed model's: the resident row is its compute side, not a peer.
        r["efficiency"] = r["bound_ms"] / r["ms"] if r["method"] != "resident" and r["bound_ms"] else None
        r["x_vs_accelerate"] = accel / r["ms"] if accel else None
        x = f"{r['x_vs_accelerate']:.2f}" if r["x_vs_accelerate"] else "-"
        eff = f"{r['efficiency']:7.2f}" if r["efficiency"] is not None else f"{'-':>7}"
        bound = f"{r['bound_ms']:9.1f}" if r["bound_ms"] else f"{'-':>9}"
        device = f"{r['device_bytes'] / MB:10.0f}" if r["device_bytes"] is not None else f"{'-':>10}"
        print(f"{r['workload']:13} {r['method']:44} {r['ms']:8.1f} {bound} {eff} {x:>8} {device}  {r['check']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"link_gbps": link, "d2h_gbps": d2h, "rows": rows}, f, indent=1)
    return 0


def link_gbps(torch, sluice, dev):
    host = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
    on = torch.empty_like(host, device=dev)
    best = pinned_copy_gbps(torch, host, on, to_device=True, repeats=6)
    try:
        best = max(best, sluice._sluice._engine_rates(dev.index)["h2d_gbps"])
    except Exception:  # noqa: BLE001 - torch's copies alone then
        pass
    return best


def d2h_gbps(torch, dev):
    host = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
    on = torch.empty_like(host, device=dev)
    return pinned_copy_gbps(torch, host, on, to_device=False, repeats=6)


def param_bytes(modules):
    return sum(p.numel() * p.element_size() for m in modules for p in m.parameters())


def check(torch, got, want):
    if torch.equal(got, want):
        return "bitwise"
    return f"max |diff| {float((got.float() - want.float()).abs().max()):.3g}"


class Expert:
    """What a careful expert writes by hand: each block's weights packed in one page-locked buffer,
    two device slots, a copy stream one block ahead, an event for each copy and each slot's reader."""

    def __init__(self, torch, blocks, dev):
        self.torch, self.blocks, self.dev = torch, list(blocks), dev
        self.params = [list(b.parameters()) for b in self.blocks]
        self.layout, self.flat = [], []
        for params in self.params:
            offsets, end = [], 0
            for q in params:
                end = (end + ALIGN - 1) // ALIGN * ALIGN
                offsets.append(end)
                end += q.numel() * q.element_size()
            flat = torch.empty(end, dtype=torch.uint8).pin_memory()
            for q, o in zip(params, offsets):
                flat[o:o + q.numel() * q.element_size()].view(q.dtype).view(q.shape).copy_(q.data)
            self.layout.append(offsets)
            self.flat.append(flat)
        self.host = [[q.data for q in params] for params in self.params]
        most = max(f.numel() for f in self.flat)
        self.slots = [torch.empty(most, dtype=torch.uint8, device=dev) for _ in range(2)]
        self.copy = torch.cuda.Stream(dev)
        self.copied = [torch.cuda.Event() for _ in range(2)]
        self.done = [torch.cuda.Event() for _ in range(2)]
        self.device_bytes = 2 * most
        for k, b in enumerate(self.blocks):
            b.register_forward_pre_hook(lambda m, args, k=k: self.enter(k))
            b.register_forward_hook(lambda m, args, out, k=k: self.leave(k))

    def issue(self, k):
        s = k % 2
        self.copy.wait_event(self.done[s])  # the slot's last block has run
        with self.torch.cuda.stream(self.copy):
            self.slots[s][:self.flat[k].numel()].copy_(self.flat[k], non_blocking=True)
            self.copied[s].record(self.copy)

    def enter(self, k):
        if k == 0:
            self.issue(0)
        if k + 1 < len(self.blocks):
            self.issue(k + 1)
        self.torch.cuda.current_stream().wait_event(self.copied[k % 2])
        slot = self.slots[k % 2]
        for q, o in zip(self.params[k], self.layout[k]):
            q.data = slot[o:o + q.numel() * q.element_size()].view(q.dtype).view(q.shape)

    def leave(self, k):
        self.done[k % 2].record(self.torch.cuda.current_stream())
        for q, h in zip(self.params[k], self.host[k]):
            q.data = h


def per_block_to(torch, blocks, dev):
    """Each block's weights .to('cuda') from pageable memory as it is entered, dropped as it is left."""
    def hooks(params):
        host = [q.data for q in params]

        def enter(m, args):
            for q in params:
                q.data = q.data.to(dev)

        def leave(m, args, out):
            for q, h in zip(params, host):
                q.data = h
        return enter, leave

    for b in blocks:
        enter, leave = hooks(list(b.parameters()))
        b.register_forward_pre_hook(enter)
        b.register_forward_hook(leave)


def accelerate_or_none():
    try:
        import accelerate
        return accelerate
    except ImportError:
        return None


def run_rows(torch, sluice, dev, workload, link, repeats, make_cpu, place_rest, forward, blocks_of, budget):
    """The rows of one workload. make_cpu(): the model on the host; place_rest(model): all but its
    blocks onto the GPU; forward(model): the output; blocks_of(model): the blocks streamed."""
    rows = []
    master = make_cpu()
    streamed_bytes = param_bytes(blocks_of(master))

    def row(method, model, extra_bytes=0):
        try:
            got = forward(model)
            ms, peak = timed_with_peak(torch, lambda: forward(model), repeats)
            extra = extra_bytes() if callable(extra_bytes) else extra_bytes
            r = {"workload": workload, "method": method, "ms": ms, "bound_ms": bound_ms,
                 "device_bytes": peak + extra, "check": check(torch, got, want)}
        except Exception as e:  # noqa: BLE001 - the row says why, the others run
            r = {"workload": workload, "method": method, "ms": None, "error": f"{type(e).__name__}: {e}"[:160]}
        rows.append(r)
        print(f"  {workload} {method:44} " + (f"{r['ms']:8.1f} ms  {r['check']}" if r["ms"] else r["error"]), flush=True)

    resident = copy.deepcopy(master).to(dev)
    with torch.inference_mode():
        want = forward(resident)
        compute_ms, _ = timed_with_peak(torch, lambda: forward(resident), repeats)
    bound_ms = max(streamed_bytes / MB / link, compute_ms)
    print(f"{workload}: {streamed_bytes / MB:.0f} MB streamed, resident forward {compute_ms:.1f} ms, "
          f"bound {bound_ms:.1f} ms, budget {budget / MB:.0f} MB", flush=True)
    with torch.inference_mode():
        row("resident", resident, param_bytes([resident]))
        del resident
        torch.cuda.empty_cache()

        model = copy.deepcopy(master)
        s = sluice.StreamedLayers(blocks_of(model), budget_bytes=budget, device=dev)
        place_rest(model)
        # The ring's slots, measured: the highest use of the device's default pool (cudaMallocAsync) in the run.
        pool_before = sluice._sluice._ring_pool_memory(dev.index)["used"]
        sluice._sluice._ring_pool_memory(dev.index, reset=True)
        row(f"sluice.StreamedLayers (ahead {s.ahead})", model,
            lambda: sluice._sluice._ring_pool_memory(dev.index)["used_high"] - pool_before)
        s.remove()
        del model, s
        torch.cuda.empty_cache()

        model = copy.deepcopy(master)
        place_rest(model)
        e = Expert(torch, blocks_of(model), dev)
        row("expert: pinned, copy stream, 2 slots, events", model, e.device_bytes)
        del model, e
        torch.cuda.empty_cache()

        model = copy.deepcopy(master)
        place_rest(model)
        per_block_to(torch, blocks_of(model), dev)
        row("each block .to('cuda') from pageable", model)
        del model
        torch.cuda.empty_cache()

        accelerate = accelerate_or_none()
        if accelerate is None:
            rows.append({"workload": workload, "method": "accelerate.cpu_offload", "ms": None,
                         "error": "accelerate is not installed"})
        else:
            model = copy.deepcopy(master)
            accelerate.cpu_offload(model, execution_device=dev)
            row("accelerate.cpu_offload", model)
            del model
            torch.cuda.empty_cache()
    return rows, want


def train_rows(torch, sluice, dev, workload, links, repeats, master, place_rest, forward, blocks_of, budget):
    """A training step's forward and backward, resident and streamed, and the host optimizer's step."""
    rows = []
    link, d2h = links
    streamed_bytes = param_bytes(blocks_of(master))

    def step(model):
        loss = forward(model).float().square().mean()
        loss.backward()
        return loss

    def timed(model, after=lambda: None, backwards=1):
        """ms a backward (`backwards` of them, then after()), and the peak."""
        def once():
            for _ in range(backwards):
                step(model)
            after()
            model.zero_grad(set_to_none=True)
        ms, peak = timed_with_peak(torch, once, repeats)
        return ms / backwards, peak

    try:
        resident = copy.deepcopy(master).to(dev)
        step(resident)
        # On the host: the timed rows find the device as the resident row leaves it, not holding these.
        want = {id(q): p.grad.cpu() for p, q in zip(resident.parameters(), master.parameters())}
        resident.zero_grad(set_to_none=True)  # the next backward makes new ones: these stay as they are
        resident_ms, resident_peak = timed(resident)
        resident.zero_grad(set_to_none=True)
        resident_bytes = param_bytes([resident]) + resident_peak
        del resident
        torch.cuda.empty_cache()
    except Exception as e:  # noqa: BLE001 - the rows say why
        return [{"workload": workload, "method": "all", "ms": None, "error": f"{type(e).__name__}: {e}"[:160]}]
    # Each engine at its best: H2D and D2H are copy engines of their own and run at once, so the
    # weights in twice and the gradients out once overlap (their sum would be no bound: a step
    # measured 1.36x faster than it).
    bound_ms = max(2 * streamed_bytes / MB / link, streamed_bytes / MB / d2h, resident_ms)
    print(f"{workload}: resident step {resident_ms:.1f} ms, bound {bound_ms:.1f} ms "
          f"(2 x {streamed_bytes / MB:.0f} MB H2D beside {streamed_bytes / MB:.0f} MB D2H)", flush=True)
    rows.append({"workload": workload, "method": "resident", "ms": resident_ms, "bound_ms": bound_ms,
                 "device_bytes": resident_bytes, "check": "reference"})
    def streamed(grads, backwards=1):
        """The streamed step's row, its gradients checked first; grads="device": each step's
        gradients kept on the GPU, then copied to .grad once (grads_to_host()), after `backwards`
        backwards (micro-batches), the row's ms being a backward's."""
        model = copy.deepcopy(master)
        s = sluice.StreamedLayers(blocks_of(model), budget_bytes=budget, device=dev, grads=grads)
        try:
            place_rest(model)
            step(model)  # the gradients checked before the step is timed
            s.grads_to_host()
            check_grads = [check(torch, p.grad.cpu(), want[id(q)])
                           for p, q in zip(model.parameters(), master.parameters())]
            worst = next((c for c in check_grads if c != "bitwise"), "bitwise")
            model.zero_grad(set_to_none=True)
            pool_before = sluice._sluice._ring_pool_memory(dev.index)["used"]
            sluice._sluice._ring_pool_memory(dev.index, reset=True)
            ms, peak = timed(model, s.grads_to_host, backwards)
            ring = sluice._sluice._ring_pool_memory(dev.index)["used_high"] - pool_before
        except BaseException:
            s.remove()  # its ring's slots go before the next row's
            raise
        rest = param_bytes([model]) - streamed_bytes  # resident rest (B: embeddings, head) and its gradients
        kept = ", fwd+bwd" if grads == "host" else f", gradients kept on the GPU, out after {backwards} backward(s)"
        rows.append({"workload": workload, "method": f"sluice.StreamedLayers (ahead {s.ahead}){kept}",
                     "ms": ms, "bound_ms": bound_ms, "device_bytes": ring + peak + rest,
                     "check": f"grads {worst}"})
        print(f"  {workload} streamed{kept} {ms:8.1f} ms  grads {worst}", flush=True)
        return model, s

    try:
        model, s = streamed("host")
        try:
            host = [p for b in blocks_of(model) for p in b.parameters()]
            opt = torch.optim.SGD(host, lr=1e-6)
            step(model)
            t0 = time.perf_counter()
            opt.step()
            opt_ms = (time.perf_counter() - t0) * 1e3
            rows.append({"workload": workload, "method": "torch.optim.SGD step over the host params",
                         "ms": opt_ms, "bound_ms": None, "device_bytes": None, "check": "on the CPU, once"})
        finally:
            s.remove()  # the ring's slots go before the next row's, whatever happened
        del model, s
        torch.cuda.empty_cache()
    except Exception as e:  # noqa: BLE001
        rows.append({"workload": workload, "method": "sluice.StreamedLayers, fwd+bwd", "ms": None,
                     "error": f"{type(e).__name__}: {e}"[:160]})
    for backwards in (1, 4):  # one copy out a backward, and one for four (accumulation over micro-batches)
        try:
            model, s = streamed("device", backwards)
            s.remove()
            del model, s
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001
            rows.append({"workload": workload, "method": f"sluice.StreamedLayers, gradients kept on the GPU, "
                         f"out after {backwards} backward(s)", "ms": None, "error": f"{type(e).__name__}: {e}"[:160]})
    return rows


def workload_a(torch, sluice, dev, links, repeats):
    link = links[0]
    nn = torch.nn
    torch.manual_seed(0)

    def make():
        blocks = [nn.Sequential(nn.Linear(4096, 16384), nn.GELU(), nn.Linear(16384, 4096)) for _ in range(16)]
        return nn.Sequential(*blocks).to(torch.bfloat16)

    x = torch.randn(8, 4096, device=dev, dtype=torch.bfloat16)
    master = make()
    budget = param_bytes([master]) // 4
    rows, _ = run_rows(torch, sluice, dev, "A mlp", link, repeats, lambda: master, lambda m: None,
                       lambda m: m(x), lambda m: list(m), budget)
    rows += train_rows(torch, sluice, dev, "A mlp train", links, repeats, master, lambda m: None,
                       lambda m: m(x), lambda m: list(m), budget)
    return rows


def workload_b(torch, sluice, dev, links, repeats, layers):
    link = links[0]
    try:
        import transformers
    except ImportError:
        return [{"workload": "B llama", "method": "all", "ms": None, "error": "transformers is not installed"}]
    config = transformers.LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=layers,
                                      num_attention_heads=32, num_key_value_heads=32, vocab_size=32000)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)  # made in bf16: half the host memory and time of float32 first
    try:
        master = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    finally:
        torch.set_default_dtype(torch.float32)
    ids = torch.randint(0, config.vocab_size, (1, 128), device=dev)
    layer = param_bytes([master.model.layers[0]])
    budget = max(param_bytes(master.model.layers) // 4, 2 * layer + (1 << 20))  # two slots at least

    def place_rest(model):
        model.to(dev)  # StreamedLayers leaves its layers' weights on the host; for the others, moved back below
        for q in model.model.layers.parameters():
            if q.is_cuda:
                q.data = q.data.cpu()

    def forward(model):
        return model(ids, use_cache=False).logits

    rows, want = run_rows(torch, sluice, dev, "B llama", link, repeats, lambda: master, place_rest, forward,
                          lambda m: list(m.model.layers), budget)
    rows += train_rows(torch, sluice, dev, "B llama train", links, repeats, master, place_rest, forward,
                       lambda m: list(m.model.layers), budget)
    accelerate = accelerate_or_none()
    if accelerate is not None:
        # accelerate's own placement, given the GPU what the resident rest and sluice's budget take.
        rest = param_bytes([master]) - param_bytes(master.model.layers)
        try:
            with torch.inference_mode():
                model = copy.deepcopy(master)
                device_map = accelerate.infer_auto_device_map(
                    model, max_memory={dev.index: rest + budget, "cpu": 1 << 40},
                    no_split_module_classes=["LlamaDecoderLayer"])
                model = accelerate.dispatch_model(model, device_map=device_map, main_device=dev.index)
                got = forward(model)
                ms, peak = timed_with_peak(torch, lambda: forward(model), repeats)
            on_gpu = sum(1 for v in device_map.values() if v == dev.index or v == f"cuda:{dev.index}")
            rows.append({"workload": "B llama", "method": f"accelerate device_map ({on_gpu}/{len(device_map)} on GPU)",
                         "ms": ms, "bound_ms": rows[0]["bound_ms"], "device_bytes": peak + rest,
                         "check": check(torch, got.to(dev), want)})
            print(f"  B llama device_map {ms:8.1f} ms", flush=True)
        except Exception as e:  # noqa: BLE001
            rows.append({"workload": "B llama", "method": "accelerate device_map", "ms": None,
                         "error": f"{type(e).__name__}: {e}"[:160]})
    return rows


if __name__ == "__main__":
    sys.exit(main())
