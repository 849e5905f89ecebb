"""What the Python peers share: the torch import that answers "skipped"
instead of failing, a GPU step of a set length (torch.cuda._sleep counts
cycles, not time, so its cycles per millisecond are measured first), and how
a method's runs are timed and summed up."""
import json
import time


def cuda_torch():
    """(torch, None), or (None, why not): no torch, no numpy, or no GPU."""
    try:
        import numpy  # noqa: F401  (the peers need it too)
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("PyTorch sees no CUDA device")
        return torch, None
    except Exception as e:  # noqa: BLE001 - the caller says why it did not run
        return None, str(e)


def torch_or_skip(out_path):
    """torch, or None after writing {"skipped": reason} to out_path (the bench goes on without this peer)."""
    torch, why = cuda_torch()
    if torch is None:
        with open(out_path, "w") as f:
            json.dump({"skipped": why}, f)
    return torch


def pinned_copy_gbps(torch, host, on_device, to_device, repeats):
    """The best of `repeats` copies between a page-locked host tensor and a device tensor of its
    size (H2D with to_device, else D2H), timed with events: the link at its best, in GB/s."""
    best = 0.0
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        (on_device.copy_(host, non_blocking=True) if to_device else host.copy_(on_device, non_blocking=True))
        stop.record()
        stop.synchronize()
        best = max(best, host.numel() * host.element_size() / 1e9 / (start.elapsed_time(stop) / 1e3))
    return best


def sleep_cycles_per_ms(torch):
    """Cycles of torch.cuda._sleep per ms, measured with events once the clocks are up."""
    for _ in range(20):
        torch.cuda._sleep(1_000_000)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    stop.record()
    torch.cuda.synchronize()
    return 10_000_000 / start.elapsed_time(stop)


def timed(repeats, poison, run):
    """ms of each timed run, in the order they ran, after one warm-up."""
    import torch
    samples = []
    for i in range(repeats + 1):  # the first is the warm-up
        poison()
        t0 = time.perf_counter()
        run()
        torch.cuda.synchronize()
        if i > 0:
            samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def timed_with_peak(torch, run, repeats, settle=None):
    """(median ms, peak bytes torch allocated above what it held before the timed runs) of run()
    after one warm-up; `settle()` runs between the warm-up and the base (to let go of what the
    warm-up left that the timed runs make again, such as gradients)."""
    run()
    if settle is not None:
        settle()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    return median(samples), torch.cuda.max_memory_allocated() - base


def median(samples):
    s = sorted(samples)
    return s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])
