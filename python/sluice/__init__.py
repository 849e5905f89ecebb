"""sluice: host data through GPU work at the speed of the slowest engine.

    import numpy as np, sluice, torch

    a = np.random.rand(50_000_000).astype(np.float32)       # pageable is fine: staged, then page-locked
    out = np.empty_like(a)
    p = sluice.Pipeline(kernel_order="independent", report_bound=True)  # chunks stand alone; measure the bound
    x, y = p.input(a), p.output(out)
    p.compute(lambda chunk: torch.mul(chunk[x], 2, out=chunk[y]))   # runs on chunk's stream
    report = p.run()                                          # report.wall_ms, report.bound, report.efficiency

    for inputs, targets in sluice.TokenLoader(["train_*.bin"], batch=16, seq=1024, shuffle=True):
        loss = model(inputs, targets)                          # ready on torch's current stream

    for images, labels in sluice.Prefetcher(DataLoader(dataset, batch_size=64, num_workers=8)):
        loss = loss_fn(model(images), labels)                  # any batch, on the GPU ahead of the step

Arrays are NumPy arrays or CPU torch tensors (pinned or pageable), C-contiguous
along their first axis: that axis is the items, the rest of a row is one item.
A pipeline holds the arrays it was given for as long as it may touch them
(until clear_spans(), a rebind() of that span, or its end).
The compute callable gets each chunk's device memory as torch tensors
(chunk[handle]; chunk.cupy(handle) for CuPy) and runs inside
`torch.cuda.stream(chunk.torch_stream)`, so torch work lands on the chunk's
stream. The GIL is held only while the callable runs.
"""
from __future__ import annotations

from . import _sluice
from ._sluice import CudaError, IoError, MultiReport, RunReport, ShardError, device_count, unavailable_reason
from .job import JobPlace, job_place
from .loader import BatchPlan, TokenLoader
from .multi_pipeline import MultiPipeline
from .pipeline import Chunk, Handle, Pipeline
from .checkpoint import load_file, read_header
from .checkpoint_save import SaveHandle, save_file
from .activations import OffloadActivations, OffloadReport
from .prefetch import Prefetcher
from .pinned_collate import PinnedCollate, SlotBatch
from .streamed import StreamedLayers

__version__ = _sluice.__version__

__all__ = ["Pipeline", "MultiPipeline", "Handle", "Chunk", "Prefetcher", "PinnedCollate", "SlotBatch", "StreamedLayers", "OffloadActivations",
           "OffloadReport", "load_file", "read_header", "save_file", "SaveHandle", "TokenLoader", "BatchPlan",
           "RunReport", "MultiReport",
           "CudaError", "IoError", "ShardError", "JobPlace", "job_place", "device_count", "unavailable_reason",
           "write_svg", "write_chrome_trace", "__version__"]


def write_svg(path, reports, titles=()):
    """A timeline picture of recorded runs (Pipeline(record=True)), one lane per engine."""
    _sluice.write_timeline(str(path), list(reports), list(titles), "svg")


def write_chrome_trace(path, reports, titles=()):
    """The recorded runs as Chrome trace JSON (opens in Perfetto and chrome://tracing)."""
    _sluice.write_timeline(str(path), list(reports), list(titles), "chrome")
