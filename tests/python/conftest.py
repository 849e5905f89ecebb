"""Finds the built module: SLUICE_PYTHON_PATH, else <repo>/build/release/python."""
import os
import pathlib
import sys

import pytest

root = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, os.environ.get("SLUICE_PYTHON_PATH", str(root / "build" / "release" / "python")))

import sluice  # noqa: E402

gpu = pytest.mark.skipif(sluice.device_count() == 0, reason=f"no CUDA device: {sluice.unavailable_reason()}")


def torch_or_skip():
    return pytest.importorskip("torch", reason="PyTorch is not installed")
