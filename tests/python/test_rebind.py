"""rebind() checks a handle as chunk[handle] does: this pipeline's, of its spans now. (It once
re-pointed whichever span had the handle's index: a handle of another pipeline, or one from before
clear_spans(), moved this pipeline's span, and one of another item size made the next run write
past the end of the new array.)"""
import numpy as np
import pytest

import sluice
from conftest import gpu, torch_or_skip


def test_a_handle_this_pipeline_never_made_is_refused_before_the_gpu_is_needed():
    p = sluice.Pipeline()
    foreign = sluice.Handle(0, np.dtype("float32"), (), "input")
    with pytest.raises(ValueError, match="is not a span of this pipeline"):
        p.rebind(foreign, np.zeros(10, np.float32))
    with pytest.raises(TypeError, match="rebind\\(\\) takes a span handle .* not int"):
        p.rebind(0, np.zeros(10, np.float32))


@gpu
def test_a_handle_of_another_pipeline_is_refused_and_the_span_stays():
    torch_or_skip()
    a, out = np.arange(1000, dtype=np.float32), np.zeros(1000, np.float32)
    other = sluice.Pipeline()
    wide = np.zeros(1000, np.float64)
    foreign = other.input(wide)  # index 0 too, items of 8 bytes
    p = sluice.Pipeline(chunk_items=250)
    x, y = p.input(a), p.output(out)
    p.compute(lambda c: c[y].copy_(c[x] * 2))
    p.run()
    with pytest.raises(ValueError, match="is not a span of this pipeline"):
        p.rebind(foreign, np.full(1000, 9.0))
    p.run()
    np.testing.assert_array_equal(out, a * 2)


@gpu
def test_a_handle_from_before_clear_spans_is_refused():
    torch_or_skip()
    p = sluice.Pipeline()
    stale_x = p.input(np.ones(100, np.float32))
    p.output(np.zeros(100, np.float32))
    p.clear_spans()
    a, out = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    x, y = p.input(a), p.output(out)
    p.compute(lambda c: c[y].copy_(c[x] + 1))
    with pytest.raises(ValueError, match="is not a span of this pipeline"):
        p.rebind(stale_x, np.full(100, 7, np.float32))
    p.run()
    np.testing.assert_array_equal(out, a + 1)


@gpu
def test_the_pipeline_itself_refuses_a_generation_not_its_own():
    # Past the Python check: the binding hands the handle's own generation to the C++ pipeline.
    torch_or_skip()
    other = sluice.Pipeline()
    foreign = other.input(np.zeros(10, np.float32))
    p = sluice.Pipeline()
    x = p.input(np.zeros(10, np.float32))
    y = p.output(np.zeros(10, np.float32))
    new = np.ones(10, np.float32)
    with pytest.raises(RuntimeError, match="belongs to another pipeline"):
        p._core.rebind(x.index, foreign.generation, "input", new.__array_interface__["data"][0], 10, new)
    with pytest.raises(RuntimeError, match="needs writable memory"):
        p._core.rebind(y.index, y.generation, "input", new.__array_interface__["data"][0], 10, new)


@gpu
def test_rebind_with_its_own_handle_moves_the_span():
    torch_or_skip()
    p = sluice.Pipeline()
    a, b, out = np.arange(100, dtype=np.float32), np.full(100, 5, np.float32), np.zeros(100, np.float32)
    x, y = p.input(a), p.output(out)
    p.compute(lambda c: c[y].copy_(c[x] + 1))
    p.run()
    p.rebind(x, b)
    p.run()
    np.testing.assert_array_equal(out, np.full(100, 6, np.float32))
