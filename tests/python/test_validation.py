"""Bad input gets a clear error before any work, with or without a GPU. The checks are the C++
library's own: the Python side has no copies of them."""
import importlib.metadata
import re

import numpy as np
import pytest

import sluice
from conftest import ROOT


def test_options_are_checked_by_the_library_first():
    with pytest.raises(ValueError, match="host_memory must be one of 'automatic', 'stage', 'register', not 'pin'"):
        sluice.Pipeline(host_memory="pin")
    with pytest.raises(ValueError, match="pipeline depth must be at least 1"):
        sluice.Pipeline(depth=0)
    with pytest.raises(ValueError, match="kernel_order must be one of 'in_chunk_order', 'independent', not 'any'"):
        sluice.Pipeline(kernel_order="any")
    with pytest.raises(ValueError, match="compute_streams = 2 would run kernels out of chunk order") as refused:
        sluice.Pipeline(compute_streams=2)
    # In the words of the Python surface, not the C++ one.
    assert "kernel_order='independent'" in str(refused.value) and "KernelOrder::" not in str(refused.value)
    sluice.Pipeline(kernel_order="independent", compute_streams=3)  # stated: allowed


def test_arrays_are_checked_before_the_gpu_is_touched():
    p = sluice.Pipeline()
    with pytest.raises(ValueError, match="not C-contiguous"):
        p.input(np.zeros((100, 4), np.float32)[:, 1])
    with pytest.raises(ValueError, match="0-d"):
        p.input(np.float32(3))
    read_only = np.zeros(10, np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        p.output(read_only)

    class DeviceArray:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False), "version": 3}

    with pytest.raises(TypeError, match="device memory where host memory belongs"):
        p.input(DeviceArray())


def test_an_output_the_results_could_not_reach_is_refused():
    # np.asarray(list) is a copy: the results would go there and the list stay as it was.
    p = sluice.Pipeline()
    results = [0.0] * 10
    with pytest.raises(TypeError, match="an output must be memory the results can be written into .* not a list"):
        p.output(results)
    with pytest.raises(TypeError, match="not a tuple"):
        p.inout((1, 2, 3))


def test_import_works_without_a_gpu_and_says_why():
    count = sluice.device_count()
    assert count >= 0
    if count == 0:
        assert sluice.unavailable_reason()


def test_the_version_is_the_cmake_projects():
    cmake = re.search(r"project\(sluice\s+VERSION\s+([0-9.]+)", (ROOT / "CMakeLists.txt").read_text()).group(1)
    assert sluice.__version__ == cmake
    assert importlib.metadata.version("sluice") == cmake
