"""A process's place in a data-parallel job: its rank, the world and its GPU.

Taken, in this order, from what the caller gives, from an initialized
torch.distributed process group, from the environment torchrun (and most
launchers) set (RANK, WORLD_SIZE), else rank 0 of 1. LOCAL_RANK picks the
GPU, unless fewer GPUs are visible (a launcher that shows each process only
its own): then the current one.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class JobPlace:
    rank: int
    world: int
    device: Optional[int]  # None: the current device
    source: str            # where rank and world came from, for messages


def _from_process_group():
    # A process group exists only if torch is imported: no need to import it here.
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


def _from_environment():
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None and world is None:
        return None
    if rank is None or world is None:
        raise ValueError(f"the environment sets {'RANK' if rank is not None else 'WORLD_SIZE'} without "
                         f"{'WORLD_SIZE' if rank is not None else 'RANK'}: set both, or pass rank= and world=")
    try:
        return int(rank), int(world)
    except ValueError:
        raise ValueError(f"RANK={rank!r} and WORLD_SIZE={world!r} must be integers") from None


def job_place(rank=None, world=None, device=None) -> JobPlace:
    """Where this process stands in its job; arguments given win over what is found."""
    source = "given"
    if rank is None or world is None:
        found, source = _from_process_group(), "torch.distributed"
        if found is None:
            found, source = _from_environment(), "RANK and WORLD_SIZE"
        if found is None:
            found, source = (0, 1), "a job of one process"
        rank = found[0] if rank is None else rank
        world = found[1] if world is None else world
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside a world of {world} (from {source})")
    if device is None and os.environ.get("LOCAL_RANK") is not None:
        local = int(os.environ["LOCAL_RANK"])
        # A launcher that shows each process only its own GPU leaves it current: keep that one.
        from ._sluice import device_count
        device = local if local < device_count() else None
    return JobPlace(rank, world, device, source)
