"""The tests run against the installed package: pip install --no-build-isolation . (scripts/test does it
in a fresh virtual environment). Tests that need a GPU, torch or torch.distributed skip, saying why."""
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
