#!/usr/bin/env python3
"""Safetensors checkpoints onto the GPU: sluice.load_file beside what PyTorch users run, in one
process, rows side by side, each beside the bound min(storage read rate, link) measured here.

A Llama-shaped checkpoint of bf16 tensors (written by safetensors where installed), loaded:
  - from the page cache: sluice.load_file; safetensors.torch.load_file(device="cuda"); a careful
    expert's loop (safe_open, each tensor pin_memory() and copied non_blocking on a side stream);
  - read past the page cache (the file's pages dropped with posix_fadvise first): sluice.load_file
    with direct=True (O_DIRECT) and without, and safetensors' loader.
The storage's rate is sluice's reads alone, each lane into a page-locked chunk of its own (the same
chunks, lanes and O_DIRECT or not), the best of several chunk sizes; past the page cache also one
thread reading front to back, each measured before the loads past the page cache and again after
them (a disk's rate drifts). The link is sluice's pinned H2D probe.
Before the loads, the reader alone (sluice's lanes, without the tensors or torch's allocator) reads
the file into one device buffer for every chunk size, staging slots a lane and lane count of
--reader-sweep, each read verified: how far other shapes of the same engine go.
Printed beside it, not in the bound: the same reads with each chunk into its own place of a span as
large as the file, each written once (the destination goes to memory, as the bytes a load reads
must before its copies read them). Every load is verified bitwise
against a reference copy on the GPU; the caching allocator's free memory is poisoned before each
timed load, so a load that skipped a tensor shows.

  python3 bench/checkpoint_bench.py --out checkpoint.json [--gib 3] [--dir /tmp]
"""
import argparse
import itertools
import json
import os
import sys
import threading
import time

from peer_common import median, torch_or_skip

GB = 1e9


def drop_cache(path):
    """The file's pages out of the page cache (clean pages go; the file was fsynced when written)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm_cache(path):
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def llama_tensors(torch, gib):
    """Layers of a Llama-7B-like shape (hidden 4096, MLP 11008) until about `gib` GiB of bf16."""
    g = torch.Generator().manual_seed(11)
    h, m = 4096, 11008
    out = {"model.embed_tokens.weight": torch.randn(8000, h, generator=g).to(torch.bfloat16)}
    layer = 0
    while sum(t.numel() * 2 for t in out.values()) < gib * (1 << 30):
        p = f"model.layers.{layer}."
        for name, shape in (("self_attn.q_proj.weight", (h, h)), ("self_attn.k_proj.weight", (h, h)),
                            ("self_attn.v_proj.weight", (h, h)), ("self_attn.o_proj.weight", (h, h)),
                            ("mlp.gate_proj.weight", (m, h)), ("mlp.up_proj.weight", (m, h)),
                            ("mlp.down_proj.weight", (h, m)), ("input_layernorm.weight", (h,)),
                            ("post_attention_layernorm.weight", (h,))):
            out[p + name] = (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)
        layer += 1
    out["model.norm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--gib", type=float, default=3.0)
    p.add_argument("--dir", default=".", help="where the checkpoint is written (a disk, not tmpfs, for the O_DIRECT rows)")
    p.add_argument("--repeats", type=int, default=5, help="timed loads from the page cache, each method")
    p.add_argument("--cold-repeats", type=int, default=2, help="timed loads past the page cache, each method")
    p.add_argument("--chunks-mib", default="1,2,4,8", help="sluice's chunk sizes swept from the page cache")
    p.add_argument("--reader-sweep", default="2,4:2,4:8,12,16", metavar="CHUNKS:STAGING:LANES[:WAITS]",
                   help="the reader alone into one device buffer from the page cache, every combination of chunk "
                        "MiB, staging slots a lane and lanes, and how a lane waits for its staging slot's copy "
                        "(sleep, nap or poll; the reader's own where not given) (\"\": none)")
    a = p.parse_args()
    torch = torch_or_skip(a.out)
    if torch is None:
        return 0
    import sluice
    try:
        import safetensors.torch as st
        from safetensors import safe_open
    except ImportError:
        st = safe_open = None
    dev = torch.device("cuda", 0)
    path = os.path.join(a.dir, "sluice-checkpoint-bench.safetensors")

    t0 = time.perf_counter()
    tensors = llama_tensors(torch, a.gib)
    if st is not None:
        st.save_file(tensors, path)
    else:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
        from test_checkpoint import _write
        _write(path, torch, tensors)
    header = sluice.read_header(path)
    data_bytes = header["file_bytes"] - header["data_begin"]
    reference = {k: v.to(dev) for k, v in tensors.items()}
    del tensors
    print(f"checkpoint: {len(reference)} tensors, {data_bytes / GB:.2f} GB of data, written in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)

    rates = sluice._sluice._engine_rates(0)
    link_gbps = rates["h2d_gbps"]
    threads = rates["staging_threads"]

    def read_rate(direct, chunk_mib=2, into="lane"):
        """GB/s of the load's reads alone: into="lane", each lane into a chunk of its own again and again
        (its destination stays in the CPU's cache); "place", each chunk into its own place of a span as
        large as the file (each written once: the destination goes to memory)."""
        best = 0.0
        for _ in range(2 if not direct else 1):  # a dropped file's read takes seconds: the caller repeats
            if direct:
                drop_cache(path)
            else:
                warm_cache(path)
            n, s, took_direct = sluice._sluice._read_file_rate(path, header["data_begin"], data_bytes,
                                                                chunk_bytes=chunk_mib << 20, threads=0, direct=direct,
                                                                into=into)
            if direct and not took_direct:
                print("the file system refused O_DIRECT: direct reads went through the page cache", flush=True)
            best = max(best, n / s / GB)
        return best

    def sequential_read_rate():
        """GB/s of one thread reading the dropped file front to back in 16 MiB reads: the kernel's
        readahead (what a loader that maps the file gets, as safetensors' does), which on some disks
        beats lanes of reads at once; the storage's best is the best of all."""
        drop_cache(path)
        view = memoryview(bytearray(16 << 20))
        n, t = 0, time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            f.seek(header["data_begin"])
            while got := f.readinto(view):
                n += got
        return n / (time.perf_counter() - t) / GB

    def poison():
        # Free memory of the caching allocator filled with 0xA5: a tensor a load left unwritten shows.
        free = torch.empty(data_bytes + (64 << 20), dtype=torch.uint8, device=dev).fill_(0xA5)
        del free
        torch.cuda.synchronize()

    def verify(got):
        assert sorted(got) == sorted(reference), "the names differ"
        for k, ref in reference.items():
            t = got[k]
            assert t.is_cuda and t.dtype == ref.dtype and t.shape == ref.shape, k
            assert torch.equal(t.view(torch.int16), ref.view(torch.int16)), f"{k} differs"

    def hand_written():
        out = {}
        side = torch.cuda.Stream(dev)
        with safe_open(path, framework="pt", device="cpu") as f, torch.cuda.stream(side):
            for k in f.keys():
                out[k] = f.get_tensor(k).pin_memory().to(dev, non_blocking=True)
        side.synchronize()
        return out

    def timed(load, repeats, cold=False):
        """ms of each load, each one verified; from the page cache after a warm-up, past it with none
        (the rows before warmed the code paths)."""
        samples = []
        for i in range(repeats + (0 if cold else 1)):
            drop_cache(path) if cold else warm_cache(path)
            poison()
            t = time.perf_counter()
            got = load()
            torch.cuda.synchronize()
            ms = (time.perf_counter() - t) * 1e3
            verify(got)
            del got
            if cold or i > 0:
                samples.append(ms)
        return samples

    def joint_rates():
        """The page cache's reads and the link each at its best while the other runs too: both read
        host memory, and a load needs both at once (an H100 host read 48 GB/s alone, 38.5 beside
        the link's 52). (read GB/s, link GB/s)."""
        pin = torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True)
        dst = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
        side = torch.cuda.Stream(dev)
        running, rates = [True], []

        def copies():
            with torch.cuda.stream(side):
                while running[0]:
                    t = time.perf_counter()
                    for _ in range(4):
                        dst.copy_(pin, non_blocking=True)
                    side.synchronize()
                    rates.append(4 * pin.numel() / (time.perf_counter() - t) / GB)

        thread = threading.Thread(target=copies)
        thread.start()
        time.sleep(0.1)
        read = 0.0
        for c in (1, 2, 4):
            warm_cache(path)
            n, s, _ = sluice._sluice._read_file_rate(path, header["data_begin"], data_bytes, chunk_bytes=c << 20, threads=0)
            read = max(read, n / s / GB)
        running[0] = False
        thread.join()
        return read, max(rates)

    def lane_summary(load):
        """Where one more load's time went: its setup (header, tensors, cache check) and its read, and
        the lanes' share of the read spent in pread and waiting for their staging slots' copies."""
        warm_cache(path)
        poison()
        report = {}
        verify(load(report))
        lanes = report["lanes"]
        read_lanes = [lane for lane in lanes if lane["chunks"]]  # a lane the others left no chunk has no first read
        span = max(lane["finished_seconds"] for lane in lanes)
        s = {"setup_ms": report["setup_seconds"] * 1e3, "read_ms": report["read_seconds"] * 1e3, "lanes": len(lanes),
             "header_ms": report["header_seconds"] * 1e3, "tensors_ms": report["tensors_seconds"] * 1e3,
             "chunks_min": min(lane["chunks"] for lane in lanes), "chunks_max": max(lane["chunks"] for lane in lanes),
             "reading_share": sum(lane["reading_seconds"] for lane in lanes) / (span * len(lanes)),
             "waiting_share": sum(lane["putting_seconds"] - lane["reading_seconds"] for lane in lanes) / (span * len(lanes)),
             "first_lane_done_ms": min(lane["finished_seconds"] for lane in lanes) * 1e3, "last_lane_done_ms": span * 1e3,
             "first_read_ms": min(lane["started_seconds"] for lane in read_lanes) * 1e3,
             "rings_made_ms": min(lane["ring_made_seconds"] for lane in lanes) * 1e3,
             "last_ring_made_ms": max(lane["ring_made_seconds"] for lane in lanes) * 1e3,
             "last_first_read_ms": max(lane["started_seconds"] for lane in read_lanes) * 1e3}
        print(f"  one load's lanes: setup {s['setup_ms']:.1f} ms (header {s['header_ms']:.2f}, tensors {s['tensors_ms']:.2f}), "
              f"read {s['read_ms']:.1f} ms on {s['lanes']} lanes "
              f"({s['chunks_min']}-{s['chunks_max']} chunks each); in pread {s['reading_share']:.0%} of the lanes' time, "
              f"waiting for staging slots {s['waiting_share']:.0%}; rings made at {s['rings_made_ms']:.2f}-"
              f"{s['last_ring_made_ms']:.2f} ms, first reads at {s['first_read_ms']:.2f}-"
              f"{s['last_first_read_ms']:.2f} ms, lanes done at {s['first_lane_done_ms']:.1f}-"
              f"{s['last_lane_done_ms']:.1f} ms", flush=True)
        return s

    def reader_sweep(spec):
        """The reader alone, without the tensors or torch's allocator: the file's data into one device
        buffer (poisoned before each read, every tensor's bytes compared after it), median of 3 after a
        warm-up (of 5 where several staging waits take turns), for every chunk size, staging slots a
        lane, lane count and staging wait: where the load's reads could go with other shapes of the
        same engine."""
        parts = spec.split(":")
        if len(parts) not in (3, 4):
            raise SystemExit(f"--reader-sweep {spec!r}: CHUNKS:STAGING:LANES[:WAITS]")
        chunk_part, staging_part, lanes_part, *wait_part = parts
        chunks = [float(x) for x in chunk_part.split(",")]  # MiB, fractions too
        stagings, lanes = ([int(x) for x in part.split(",")] for part in (staging_part, lanes_part))
        waits = wait_part[0].split(",") if wait_part else [None]  # None: the reader's own
        buffer = torch.empty(data_bytes, dtype=torch.uint8, device=dev)
        ranges = [(header["data_begin"], data_bytes, buffer.data_ptr())]
        found = []
        # Several waits of one shape take turns, read by read, so that the machine's drift falls on each alike.
        rounds = 4 if len(waits) == 1 else 6
        for chunk, staging, lane_count in itertools.product(chunks, stagings, lanes):
            warm_cache(path)
            samples = {wait: [] for wait in waits}
            for i in range(rounds):
                for wait in waits:
                    buffer.fill_(0xA5)
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    sluice._sluice._read_file_ranges(path, ranges, dev.index, chunk_bytes=int(chunk * (1 << 20)),
                                                     staging=staging, threads=lane_count, direct=False,
                                                     staging_wait=wait)
                    torch.cuda.synchronize()
                    if i:
                        samples[wait].append(time.perf_counter() - t)
                    for name, _, _, begin, end in header["tensors"]:
                        at = begin - header["data_begin"]
                        want = reference[name].view(torch.uint8).flatten()
                        assert torch.equal(buffer[at:at + end - begin], want), f"{name} differs"
            for wait in waits:
                gbps = data_bytes / median(samples[wait]) / GB
                found.append({"chunk_mib": chunk, "staging": staging, "lanes": lane_count, "wait": wait, "gbps": gbps})
                print(f"  reader alone: chunk {chunk:g} MiB, {staging} staging slots a lane, {lane_count} lanes, "
                      f"staging wait {wait or 'default'}: {gbps:5.1f} GB/s ({gbps / link_gbps:.2f} of the link), verified", flush=True)
        del buffer
        torch.cuda.empty_cache()
        return found

    readers = reader_sweep(a.reader_sweep) if a.reader_sweep else []

    rows = []

    def row(name, samples, read_gbps, where, joint_gbps=None):
        bound_ms = data_bytes / (min(read_gbps, link_gbps) * GB) * 1e3
        joint_ms = data_bytes / (joint_gbps * GB) * 1e3 if joint_gbps else None
        ms = median(samples)
        rows.append({"where": where, "method": name, "ms": ms, "samples_ms": samples, "gbps": data_bytes / ms / 1e6,
                     "bound_ms": bound_ms, "efficiency": bound_ms / ms, "joint_bound_ms": joint_ms,
                     "joint_efficiency": joint_ms / ms if joint_ms else None, "verified": True})
        joint = f"  joint {joint_ms:7.1f} ms  eff {joint_ms / ms:5.2f}" if joint_ms else ""
        print(f"  {where:<10} {name:<44} {ms:9.1f} ms  {data_bytes / ms / 1e6:6.1f} GB/s  bound {bound_ms:7.1f} ms  "
              f"eff {bound_ms / ms:5.2f}{joint}", flush=True)

    cached_read = max(read_rate(False, c) for c in (1, 2, 4))
    # Not the bound's (the reads at their best are): how far the load's own kind of reads get.
    placed_read = max(read_rate(False, c, into="place") for c in (2, 4))
    joint_read, joint_link = joint_rates()
    joint = min(joint_read, joint_link)
    print(f"link {link_gbps:.1f} GB/s (pinned H2D), page-cache reads {cached_read:.1f} GB/s on {threads} threads "
          f"({placed_read:.1f} into a span as large as the file); at once: reads {joint_read:.1f} beside the link's "
          f"{joint_link:.1f} GB/s", flush=True)
    sweep = {}
    for c in [int(x) for x in a.chunks_mib.split(",")]:
        sweep[c] = median(timed(lambda: sluice.load_file(path, dev, chunk_mib=c), a.repeats))
        print(f"  sweep: chunk {c} MiB: {sweep[c]:.1f} ms", flush=True)
    best_chunk = min(sweep, key=sweep.get)
    row("sluice.load_file (direct='auto': cached)", timed(lambda: sluice.load_file(path, dev), a.repeats), cached_read,
        "page cache", joint)
    lanes = lane_summary(lambda report: sluice.load_file(path, dev, _report=report))
    row(f"sluice.load_file(chunk_mib={best_chunk}) (best of sweep)",
        timed(lambda: sluice.load_file(path, dev, chunk_mib=best_chunk), a.repeats), cached_read, "page cache", joint)
    if st is not None:
        row("safetensors.torch.load_file(device='cuda')",
            timed(lambda: st.load_file(path, device="cuda:0"), max(2, a.repeats // 2)), cached_read, "page cache", joint)
        row("safe_open + pin_memory + side stream (hand-written)", timed(hand_written, a.repeats), cached_read, "page cache", joint)

    # The storage at its best: O_DIRECT reads alone of three chunk sizes, and buffered reads of the
    # dropped file (lanes, and one thread front to back), each before the loads past the page cache
    # and again after them; the best of all is the bound's storage rate. Measured both sides because
    # a disk's rate drifts over seconds (a virtual disk's own cache warming, bursts): one O_DIRECT
    # load read faster than every read measured before it.
    def storage_rates():
        direct = max(read_rate(True, c) for c in (2, 4, 8))
        drop_cache(path)
        n, s, _ = sluice._sluice._read_file_rate(path, header["data_begin"], data_bytes, threads=0, direct=False)
        return direct, n / s / GB, sequential_read_rate()

    before = storage_rates()
    drop_cache(path)
    print(f"share of the file cached after dropping it: {sluice._sluice._cached_fraction(path, 0, data_bytes):.3f}")
    cold = [("sluice.load_file (direct='auto': O_DIRECT)", lambda: sluice.load_file(path, dev)),
            ("sluice.load_file(direct=False)", lambda: sluice.load_file(path, dev, direct=False))]
    if st is not None:
        cold.append(("safetensors.torch.load_file(device='cuda')", lambda: st.load_file(path, device="cuda:0")))
    cold_samples = [(name, timed(load, a.cold_repeats, cold=True)) for name, load in cold]
    after = storage_rates()
    direct_read, buffered_cold, sequential_cold = (max(b, f) for b, f in zip(before, after))
    storage = max(direct_read, buffered_cold, sequential_cold)
    print(f"storage (dropped cache), before and after the loads: O_DIRECT {before[0]:.2f} / {after[0]:.2f} GB/s, "
          f"buffered lanes {before[1]:.2f} / {after[1]:.2f}, one thread front to back {before[2]:.2f} / {after[2]:.2f}",
          flush=True)
    for name, samples in cold_samples:
        row(name, samples, storage, "storage")

    by = {(r["where"], r["method"]): r for r in rows}
    st_cached = by.get(("page cache", "safetensors.torch.load_file(device='cuda')"))
    summary = {"data_gb": data_bytes / GB, "link_gbps": link_gbps, "cached_read_gbps": cached_read,
               "cached_read_into_place_gbps": placed_read,
               "joint_read_gbps": joint_read, "joint_link_gbps": joint_link, "direct_read_gbps": direct_read, "buffered_cold_read_gbps": buffered_cold,
               "sequential_cold_read_gbps": sequential_cold, "storage_rates_before_after": [before, after],
               "chunk_sweep_ms": sweep, "reader_sweep": readers,
               "lanes_of_one_load": lanes, "rows": rows, "device": torch.cuda.get_device_name(0)}
    if st_cached:
        summary["x_vs_safetensors_page_cache"] = st_cached["ms"] / by[("page cache", "sluice.load_file (direct='auto': cached)")]["ms"]
    with open(a.out, "w") as f:
        json.dump(summary, f, indent=1)
    os.remove(path)

    print(f"\n{summary['device']}: {data_bytes / GB:.2f} GB checkpoint; link {link_gbps:.1f} GB/s; reads: page cache "
          f"{cached_read:.1f}, O_DIRECT {direct_read:.2f}, buffered cold {buffered_cold:.2f}, one thread cold "
          f"{sequential_cold:.2f} GB/s")
    print(f"bound: min(storage, link), each alone; joint: min(reads, link) measured running at once")
    print(f"page-cache reads into a span as large as the file: {placed_read:.1f} GB/s (the bound's reads, each lane "
          f"into a chunk of its own: {cached_read:.1f})")
    print(f"{'where':<10} {'method':<52} {'ms':>8} {'GB/s':>6} {'bound':>8} {'eff':>5} {'joint':>8} {'eff':>5}  verified")
    for r in rows:
        jb = f"{r['joint_bound_ms']:8.1f} {r['joint_efficiency']:5.2f}" if r["joint_bound_ms"] else f"{'-':>8} {'-':>5}"
        print(f"{r['where']:<10} {r['method']:<52} {r['ms']:8.1f} {r['gbps']:6.1f} {r['bound_ms']:8.1f} "
              f"{r['efficiency']:5.2f} {jb}  bitwise")
    if st_cached:
        print(f"sluice vs safetensors' loader from the page cache: {summary['x_vs_safetensors_page_cache']:.1f}x")
    if readers:
        best = max(readers, key=lambda r: r["gbps"])
        print(f"the reader alone into one device buffer, best of {len(readers)} shapes: {best['gbps']:.1f} GB/s "
              f"({best['gbps'] / link_gbps:.2f} of the link) with {best['chunk_mib']} MiB chunks, {best['staging']} "
              f"staging slots a lane, {best['lanes']} lanes, staging wait {best['wait'] or 'default'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
