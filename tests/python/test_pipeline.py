"""The pipeline from Python: NumPy and torch in and out, every result checked."""
import numpy as np
import pytest

import sluice
from conftest import gpu, torch_or_skip


@gpu
@pytest.mark.parametrize("n", [1, 999, 1_000_003])
@pytest.mark.parametrize("in_type,out_type", [(np.uint8, np.float32), (np.float64, np.float64), (np.int32, np.int32)])
def test_outputs_equal_numpy_for_odd_sizes_and_types(n, in_type, out_type):
    torch = torch_or_skip()
    rng = np.random.default_rng(n)
    a = rng.integers(0, 100, n).astype(in_type)
    out = np.full(n, np.nan if np.issubdtype(out_type, np.floating) else -1, out_type)
    p = sluice.Pipeline(chunk_items=100_000)
    x, y = p.input(a), p.output(out)
    p.compute(lambda c: c[y].copy_(c[x].to(c[y].dtype) * 3 + 1))
    report = p.run()
    np.testing.assert_array_equal(out, a.astype(out_type) * 3 + 1)
    assert report.chunk_count == (n + 99_999) // 100_000


@gpu
def test_torch_tensors_in_and_out_pinned_and_pageable():
    torch = torch_or_skip()
    n = 2_000_000
    a = torch.arange(n, dtype=torch.float32)
    for pinned in (False, True):
        src = a.pin_memory() if pinned else a.clone()
        dst = torch.full((n,), float("nan"))
        if pinned:
            dst = dst.pin_memory()
        p = sluice.Pipeline()
        x, y = p.input(src), p.output(dst)
        p.compute(lambda c: torch.add(c[x], 0.5, out=c[y]))
        p.run()
        assert torch.equal(dst, a + 0.5), f"pinned={pinned}"


@gpu
@pytest.mark.parametrize("kernel_order", ["in_chunk_order", "independent"])
def test_kernel_order_gives_the_same_result(kernel_order):
    # Independent compute runs on two streams: torch's work must still land on each chunk's own.
    torch = torch_or_skip()
    a = np.arange(3_000_001, dtype=np.float32)
    out = np.full_like(a, np.nan)
    p = sluice.Pipeline(chunk_items=250_000, kernel_order=kernel_order)
    x, y = p.input(a), p.output(out)
    p.compute(lambda c: torch.mul(c[x], 3, out=c[y]).add_(1))  # exact in float32 below 2**24
    p.run()
    np.testing.assert_array_equal(out, a * 3 + 1)


@gpu
def test_rows_of_several_values_and_inout():
    torch = torch_or_skip()
    rows = np.arange(30_000 * 3, dtype=np.float32).reshape(30_000, 3)
    expected = rows * 2
    p = sluice.Pipeline(chunk_items=7000)
    h = p.inout(rows)
    p.compute(lambda c: c[h].mul_(2))
    p.run()
    np.testing.assert_array_equal(rows, expected)


@gpu
def test_a_raising_callable_comes_back_with_its_chunk():
    torch = torch_or_skip()
    a = np.ones(100_000, np.float32)
    out = np.zeros_like(a)
    p = sluice.Pipeline(chunk_items=10_000)
    x, y = p.input(a), p.output(out)

    def fn(c):
        if c.index == 3:
            raise KeyError("no such feature")
        c[y].copy_(c[x])

    p.compute(fn)
    with pytest.raises(KeyError) as info:
        p.run()
    assert "sluice chunk 3 of 10 (items 30000..40000)" in "".join(getattr(info.value, "__notes__", []))
    # The pipeline is usable after the failure.
    p.compute(lambda c: c[y].copy_(c[x]))
    p.run()
    np.testing.assert_array_equal(out, a)


@gpu
def test_bad_input_on_a_gpu():
    torch = torch_or_skip()
    p = sluice.Pipeline()
    with pytest.raises(TypeError, match="CUDA tensor"):
        p.input(torch.zeros(10, device="cuda"))
    with pytest.raises(ValueError, match="not contiguous"):
        p.input(torch.zeros(10, 10).t())
    q = sluice.Pipeline()
    q.input(np.zeros(10, np.float32))
    q.output(np.zeros(11, np.float32))
    q.compute(lambda c: None)
    with pytest.raises(ValueError, match="11 items but span 0 has 10"):
        q.run()


@gpu
def test_one_process_with_pytorch_streams_and_work_before_and_after():
    torch = torch_or_skip()
    before = torch.randn(1000, device="cuda").sum().item()  # torch first: its context, its allocator
    n = 3_000_000
    a = torch.randn(n).pin_memory()  # a tensor made by torch
    out = torch.empty(n)
    total = torch.zeros((), device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        total.zero_()  # ordered before the run by the stream
    p = sluice.Pipeline()
    x, y = p.input(a), p.output(out)

    def fn(c):
        v = c[x] * 2
        c[y].copy_(v)
        total.add_(v.sum())  # on the chunk's stream, in chunk order

    p.compute(fn)
    p.run(stream=stream)
    with torch.cuda.stream(stream):
        result = total.clone()  # ordered after the run by the same stream
    stream.synchronize()
    assert torch.equal(out, a * 2)
    assert abs(result.item() - (a.double() * 2).sum().item()) < 1e-3 * n
    after = torch.randn(1000, device="cuda").sum().item()  # torch still works
    assert np.isfinite(before) and np.isfinite(after)


@gpu
def test_report_and_timelines(tmp_path):
    torch = torch_or_skip()
    a = np.random.rand(4_000_000).astype(np.float32)
    out = np.empty_like(a)
    p = sluice.Pipeline(record=True, report_bound=True)
    x, y = p.input(a), p.output(out)
    p.compute(lambda c: torch.sqrt(c[x], out=c[y]))
    r = p.run()
    np.testing.assert_allclose(out, np.sqrt(a), rtol=1e-6)
    assert r.wall_ms > 0 and r.bound is not None and r.bound["limiter"] in r.bound["terms"]
    assert 0 < r.efficiency
    assert {i[0] for i in r.intervals} >= {"H2D copy", "compute", "D2H copy"}
    sluice.write_svg(tmp_path / "run.svg", [r], ["sqrt"])
    sluice.write_chrome_trace(tmp_path / "run.json", [r], ["sqrt"])
    assert (tmp_path / "run.svg").read_text().startswith("<svg")
    assert '"traceEvents"' in (tmp_path / "run.json").read_text()


@gpu
def test_cupy_arrays_for_cupy_users():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    a = np.arange(100_000, dtype=np.int32)
    out = np.zeros_like(a)
    p = sluice.Pipeline()
    x, y = p.input(a), p.output(out)

    def fn(c):
        assert c.__cuda_stream__() == (0, c.stream)
        # CuPy 14 takes objects with the CUDA stream protocol; before it, the raw handle.
        from_external = getattr(cupy.cuda.Stream, "from_external", None)
        with from_external(c) if from_external else cupy.cuda.ExternalStream(c.stream):
            c.cupy(y)[...] = c.cupy(x) * 5

    p.compute(fn)
    p.run()
    np.testing.assert_array_equal(out, a * 5)


@gpu
def test_a_handle_of_another_pipeline_or_from_before_clear_spans_is_refused():
    # Once this pipeline made its view of span 0, a foreign index-0 handle must still be refused,
    # not handed that view (the wrong data, silently).
    torch_or_skip()
    a, out = np.arange(1000, dtype=np.float32), np.zeros(1000, np.float32)
    other = sluice.Pipeline()
    foreign = other.input(np.zeros(1000, np.float32))
    p = sluice.Pipeline(chunk_items=250)
    x, y = p.input(a), p.output(out)
    seen = []

    def fn(c):
        c[y].copy_(c[x])
        for bad in (foreign, 0):
            try:
                c[bad]
                seen.append("accepted")
            except (ValueError, TypeError) as e:
                seen.append(type(e).__name__)

    p.compute(fn)
    p.run()
    np.testing.assert_array_equal(out, a)
    assert seen == ["ValueError", "TypeError"] * 4
    p.clear_spans()
    p.input(a)
    y2 = p.output(out)
    p.compute(lambda c: c[y2].copy_(c[x]))  # x: from before clear_spans()
    with pytest.raises(ValueError, match="is not a span of this pipeline"):
        p.run()


@gpu
def test_a_pipeline_holds_its_arrays_for_as_long_as_it_may_touch_them():
    import gc
    import weakref
    torch_or_skip()
    p = sluice.Pipeline()
    a, out = np.arange(10_000, dtype=np.float32), np.zeros(10_000, np.float32)
    alive_a, alive_out = weakref.ref(a), weakref.ref(out)
    x, y = p.input(a), p.output(out)
    del a, out
    gc.collect()
    assert alive_a() is not None and alive_out() is not None  # the pipeline holds them
    p.compute(lambda c: c[y].copy_(c[x]))
    p.run()
    np.testing.assert_array_equal(alive_out(), np.arange(10_000, dtype=np.float32))
    p.clear_spans()
    gc.collect()
    assert alive_a() is None and alive_out() is None  # let go with the spans
    b = np.ones(100, np.float32)
    alive_b = weakref.ref(b)
    p.input(b)
    del b
    gc.collect()
    assert alive_b() is not None
    del p
    gc.collect()
    assert alive_b() is None  # and with the pipeline


@gpu
def test_an_output_list_is_refused_and_a_writable_buffer_taken():
    torch_or_skip()
    p = sluice.Pipeline()
    x = p.input(np.arange(16, dtype=np.uint8))
    with pytest.raises(TypeError, match="not a list"):
        p.output([0] * 16)
    out = bytearray(16)
    y = p.output(out)
    p.compute(lambda c: c[y].copy_(c[x] + 1))
    p.run()
    assert list(out) == list(range(1, 17))


@gpu
def test_a_replayed_pipeline_calls_fn_at_its_captures_only():
    torch = torch_or_skip()
    n = 4_000_000
    a = torch.arange(n, dtype=torch.float32).pin_memory()
    out = torch.full((n,), float("nan")).pin_memory()
    calls = []
    p = sluice.Pipeline()
    x, y = p.input(a), p.output(out)

    def fn(c):
        calls.append(c.index)
        torch.mul(c[x], 2, out=c[y])

    p.compute(fn, replay=True)
    reports = []
    for run in range(4):
        out.fill_(float("nan"))
        reports.append(p.run())
        assert torch.equal(out, a * 2), f"run {run}"
    assert any("adapt_chunks" in note for note in reports[0].notes), reports[0].notes
    # Captured with timing marks to learn its chunks, captured again without
    # them, then replayed: fn is not called again.
    assert len(calls) == reports[0].chunk_count + reports[1].chunk_count
