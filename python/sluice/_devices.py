"""Which CUDA device a caller's `device` names, as the prefetcher, the streamed layers and the
checkpoint loader take it."""
from __future__ import annotations

from . import _sluice


def cuda_index(torch, device):
    """The index of the CUDA device `device` names (an int, "cuda:1", a torch.device; None or
    "cuda": torch's current device), or a RuntimeError saying why there is none."""
    if _sluice.device_count() == 0:
        raise RuntimeError(f"no CUDA device: {_sluice.unavailable_reason()}")
    index = device if isinstance(device, int) else None if device is None else torch.device(device).index
    return torch.cuda.current_device() if index is None else index
