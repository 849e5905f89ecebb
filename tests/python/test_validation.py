"""Bad input gets a clear error before any work, with or without a GPU."""
import numpy as np
import pytest

import sluice


def test_options_are_checked_first():
    with pytest.raises(ValueError, match="host_memory"):
        sluice.Pipeline(host_memory="pin")
    with pytest.raises(ValueError, match="depth"):
        sluice.Pipeline(depth=0)
    with pytest.raises(ValueError, match="kernel_order"):
        sluice.Pipeline(kernel_order="any")
    with pytest.raises(ValueError, match="out of chunk order"):
        sluice.Pipeline(compute_streams=2)
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


def test_import_works_without_a_gpu_and_says_why():
    count = sluice.device_count()
    assert count >= 0
    if count == 0:
        assert sluice.unavailable_reason()
