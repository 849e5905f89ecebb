"""The tests run against the installed package: pip install --no-build-isolation . (scripts/test does it
in a fresh virtual environment). Tests that need a GPU, torch or torch.distributed skip, saying why."""
import os
import pathlib

import pytest

try:
    import sluice
except ImportError as e:  # the source tree's python/ is not on the path on purpose: test what pip installed
    raise ImportError("sluice is not installed for this Python: pip install --no-build-isolation . "
                      "(scripts/test does it in a fresh virtual environment)") from e

ROOT = pathlib.Path(__file__).resolve().parents[2]

gpu = pytest.mark.skipif(sluice.device_count() == 0, reason=f"no CUDA device: {sluice.unavailable_reason()}")


def torch_or_skip():
    return pytest.importorskip("torch", reason="PyTorch is not installed")


def pytest_report_header(config):
    return f"sluice {sluice.__version__} from {pathlib.Path(sluice.__file__).parent}"


def pytest_configure(config):
    # SLUICE_TEST_ATTENTION=math (the sanitize stage of scripts/gpu-python sets it): torch's attention
    # as plain kernels, not its fused ones. compute-sanitizer's synccheck flags cuDNN's fused attention
    # backward, which then stops the CUDA context for every test after it; those kernels are torch's,
    # and what the sanitizers are run for is sluice's copies, streams and events around them.
    if os.environ.get("SLUICE_TEST_ATTENTION") == "math":
        try:
            import torch
        except ImportError:
            return
        for backend in ("enable_cudnn_sdp", "enable_flash_sdp", "enable_mem_efficient_sdp"):
            switch = getattr(torch.backends.cuda, backend, None)  # torch 2's; older ones have none of them
            if switch is not None:
                switch(False)
