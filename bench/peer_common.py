"""What the Python peers share: the torch import that answers "skipped"
instead of failing, and a GPU step of a set length (torch.cuda._sleep counts
cycles, not time, so its cycles per millisecond are measured first)."""
import json


def torch_or_skip(out_path):
    """torch, or None after writing {"skipped": reason} to out_path."""
    try:
        import numpy  # noqa: F401  (the peers need it too)
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("PyTorch sees no CUDA device")
        return torch
    except Exception as e:  # no torch, no numpy, or no GPU: the bench goes on without this peer
        with open(out_path, "w") as f:
            json.dump({"skipped": str(e)}, f)
        return None


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
