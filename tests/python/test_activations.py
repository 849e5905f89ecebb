"""sluice.OffloadActivations: a step's saved tensors held on the host between forward and backward. Most
tests run its engine on the host executor (_host_executor: CPU tensors as the device's, plain copies,
events that may lag), where the model runs the same CPU kernels with and without offload, so gradients
compare bitwise; the last ones run on the GPU."""
import gc
import sys
import threading

import pytest

import sluice
from conftest import ROOT, gpu, torch_or_skip

SMALL = {"buffer_bytes": 4096}


def _mlp(torch, width=16, depth=3, seed=0):
    torch.manual_seed(seed)
    nn = torch.nn
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width),
                                         nn.LayerNorm(width)) for _ in range(depth)])


def _gpt(torch, device="cpu", seed=0):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from gpt import GPT
    finally:
        sys.path.remove(str(ROOT / "examples"))
    torch.manual_seed(seed)
    return GPT(vocab=64, seq=16, layers=2, heads=2, width=32).to(device)


def _grads(torch, model, step, offload=None, backward_twice=False):
    model.zero_grad(set_to_none=True)
    if offload is None:
        loss = step(model)
    else:
        with offload:
            loss = step(model)
    loss.backward(retain_graph=backward_twice)
    if backward_twice:
        loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _assert_bitwise(torch, got, want):
    assert torch.equal(got[0], want[0])
    assert got[1].keys() == want[1].keys()
    for name in want[1]:
        assert torch.equal(got[1][name], want[1][name]), name


class Keep:
    """An op that saves `tensors` for its backward and records what the backward gets back (and when)."""

    def __init__(self, torch, offload=None):
        self.seen = []
        outer = self

        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, *tensors):
                ctx.save_for_backward(*tensors)
                ctx.label = len(outer.seen)
                outer.seen.append(None)
                return x.clone()

            @staticmethod
            def backward(ctx, g):
                got = ctx.saved_tensors
                log = list(offload._copies.log) if offload is not None else None
                outer.seen[ctx.label] = ([(t.dtype, tuple(t.shape), t.stride(), t.clone()) for t in got], log)
                return (g,) + (None,) * len(got)

        self.apply = Fn.apply


def test_mlp_gradients_equal_no_offload_bitwise_step_after_step():
    torch = torch_or_skip()
    model = _mlp(torch)
    xs = [torch.randn(8, 16, generator=torch.Generator().manual_seed(s)) for s in range(3)]
    offload = sluice.OffloadActivations(min_bytes=64, _host_executor=SMALL)
    for x in xs:
        want = _grads(torch, model, lambda m: m(x).square().mean())
        got = _grads(torch, model, lambda m: m(x).square().mean(), offload)
        _assert_bitwise(torch, got, want)
        report = offload.last_step
        assert report.offloaded_tensors > 0 and report.offloaded_bytes >= 64 * report.offloaded_tensors
        assert report.fetched_bytes == report.offloaded_bytes  # each taken once
        assert report.weights >= 6  # Linear's weights (saved as weight.t()) and LayerNorm's, left where they were
    assert offload.live_steps == 0


def test_gpt_example_gradients_equal_no_offload_bitwise():
    torch = torch_or_skip()
    model = _gpt(torch)
    g = torch.Generator().manual_seed(1)
    inputs, targets = torch.randint(0, 64, (3, 16), generator=g), torch.randint(0, 64, (3, 16), generator=g)
    offload = sluice.OffloadActivations(min_bytes=256, ahead=3, _host_executor=SMALL)
    for _ in range(2):
        want = _grads(torch, model, lambda m: m(inputs, targets))
        got = _grads(torch, model, lambda m: m(inputs, targets), offload)
        _assert_bitwise(torch, got, want)
    assert offload.last_step.offloaded_tensors >= 10  # attention's q, k, v (slices of one tensor) among them
    assert offload.live_steps == 0


def test_small_tensors_and_parameters_stay_and_the_report_counts_them():
    torch = torch_or_skip()
    offload = sluice.OffloadActivations(min_bytes=400, _host_executor={})
    keep = Keep(torch)
    w = torch.nn.Parameter(torch.ones(200))          # 800 bytes, but a weight
    frozen = torch.ones(200, requires_grad=True)     # a leaf that requires grad: as a weight
    small = torch.arange(99, dtype=torch.float32)    # 396 bytes: below min_bytes
    big = torch.arange(100, dtype=torch.float32)     # 400 bytes: offloaded
    x = torch.zeros(3, requires_grad=True)
    with offload:
        y = keep.apply(x, w, frozen, small, big)
    assert offload._copies.log == [("d2h", 0), ("h2d", 0)]  # the last saved starts back as the forward ends
    r = offload.last_step
    assert (r.offloaded_tensors, r.offloaded_bytes, r.kept_tensors, r.kept_bytes, r.weights) == (1, 400, 1, 396, 2)
    y.sum().backward()
    saved = [v for _, _, _, v in keep.seen[0][0]]
    for got, want in zip(saved, [w, frozen, small, big]):
        assert torch.equal(got, want.detach())


# Copies whose events never come done by themselves: the host is far ahead of the GPU. Without a
# bound every tensor saved would stay in device memory until its copy ran; by default 2 x ahead may.
@pytest.mark.parametrize("outgoing, most, waits", [("2 x ahead", 4, 6), (3, 3, 7), (None, 10, 0)])
def test_a_host_far_ahead_lets_outgoing_tensors_go_out_before_it_waits_for_their_copies(outgoing, most, waits):
    torch = torch_or_skip()
    offload = sluice.OffloadActivations(min_bytes=1, ahead=2, outgoing=outgoing, _host_executor={"lag": 10**6, **SMALL})
    keep = Keep(torch, offload)
    tensors = [torch.full((50,), float(k)) for k in range(10)]
    x = torch.zeros(1, requires_grad=True)
    on_the_way = []
    with offload:
        for t in tensors:
            x = keep.apply(x, t)
            on_the_way.append(len(offload._reading))
    assert (max(on_the_way), offload._copies.host_waits) == (most, waits), on_the_way
    assert offload.outgoing == (4 if outgoing == "2 x ahead" else outgoing)
    x.sum().backward()
    for k, t in enumerate(tensors):
        assert torch.equal(keep.seen[k][0][0][3], t)


def test_a_weight_saved_as_a_view_of_itself_stays_where_it_is():
    torch = torch_or_skip()
    offload = sluice.OffloadActivations(min_bytes=1, _host_executor={})
    layer = torch.nn.Linear(64, 64, bias=False)  # saves its input and weight.t(), a view of the Parameter
    leaf = torch.randn(4, 64, requires_grad=True)
    x = leaf * 1  # requires grad, not a leaf: mm saves it and weight.t() for the backward
    with offload:
        y = layer(x)
    r = offload.last_step
    assert r.weights == 1 and r.offloaded_tensors == 1 and r.offloaded_bytes == x.numel() * x.element_size()
    y.sum().backward()
    assert torch.equal(layer.weight.grad, torch.ones(4, 64).t() @ leaf.detach())
    assert torch.equal(leaf.grad, torch.ones(4, 64) @ layer.weight.detach())


def test_dtypes_shapes_strides_and_views_come_back_as_saved():
    torch = torch_or_skip()
    offload = sluice.OffloadActivations(min_bytes=1, _host_executor={})
    keep = Keep(torch)
    base = torch.arange(6 * 8 * 5, dtype=torch.float32).reshape(6, 8, 5)
    tensors = [
        base.permute(2, 0, 1),                         # dense, strides permuted: kept as they are
        base[:, 1:7:2, :],                              # a strided slice of a larger tensor: a dense copy
        base.transpose(0, 1)[2:5],                      # a view of a transposed slice
        torch.tensor([True, False, True]),
        torch.arange(7, dtype=torch.int64) - 3,
        torch.randn(4, 3).to(torch.bfloat16),
        torch.tensor(2.5),                              # zero-dim
        torch.randn(3, 1, 4).expand(3, 2, 4),           # overlapping (stride 0): a dense copy
    ]
    want = [(t.dtype, tuple(t.shape), t.clone()) for t in tensors]
    with offload:
        y = keep.apply(torch.zeros(1, requires_grad=True), *tensors)
    del tensors
    y.sum().backward()
    got, _ = keep.seen[0]
    for (dtype, shape, stride, value), (w_dtype, w_shape, w_value) in zip(got, want):
        assert (dtype, shape) == (w_dtype, w_shape)
        assert torch.equal(value, w_value)
    assert got[0][2] == (1, 40, 5)              # base.permute's own strides
    assert got[1][2] == (15, 5, 1)              # the slice, dense in the same order
    assert got[2][2] == (5, 15, 1)              # a slice of a transpose: dense, its order of strides kept (as clone)


def test_pool_grows_to_the_largest_step_then_is_reused():
    torch = torch_or_skip()
    offload = sluice.OffloadActivations(min_bytes=1, _host_executor=SMALL)
    copies = offload._copies

    def step(n, size):
        keep = Keep(torch)
        with offload:
            y = keep.apply(torch.zeros(1, requires_grad=True), *[torch.full((size,), float(k)) for k in range(n)])
        y.sum().backward()
        return [v for _, _, _, v in keep.seen[0][0]]

    step(5, 300)  # 5 x 1200 bytes: two 4096-byte buffers (three fit in one at 256-byte offsets)
    assert (offload.pool_bytes, copies.host_allocations) == (8192, 2)
    for _ in range(3):
        got = step(5, 300)
        assert (offload.pool_bytes, copies.host_allocations) == (8192, 2)  # the same buffers, nothing new
        assert all(torch.equal(v, torch.full((300,), float(k))) for k, v in enumerate(got))
    step(2, 3000)  # 12000 bytes each: a buffer of the next power of two, past the pool's size
    assert (offload.pool_bytes, copies.host_allocations) == (8192 + 2 * 16384, 4)
    step(5, 300)
    assert copies.host_allocations == 4
    assert offload.live_steps == 0
    offload.release_pool()
    assert offload.pool_bytes == 0


def test_backward_takes_tensors_back_ahead_in_reverse_order():
    torch = torch_or_skip()
    n, ahead = 9, 3
    offload = sluice.OffloadActivations(min_bytes=1, ahead=ahead, _host_executor={})
    keep = Keep(torch, offload)
    x = torch.zeros(2, requires_grad=True)
    with offload:
        y = x
        for k in range(n):
            y = keep.apply(y, torch.full((4,), float(k)))
    log = offload._copies.log
    assert log == [("d2h", k) for k in range(n)] + [("h2d", n - 1 - j) for j in range(ahead)]
    y.sum().backward()
    assert [k for kind, k in log if kind == "h2d"] == list(reversed(range(n)))  # each once, last saved first
    for k in range(n):
        saved, seen_log = keep.seen[k]
        assert torch.equal(saved[0][3], torch.full((4,), float(k)))
        # When tensor k is taken, the ones expected next (k-1 ... k-ahead) are on their way.
        issued = {i for kind, i in seen_log if kind == "h2d"}
        assert issued >= set(range(max(0, k - ahead), n)), (k, sorted(issued))


def test_a_graph_run_backward_twice_fetches_again_and_equals_no_offload():
    torch = torch_or_skip()
    model = _mlp(torch, depth=2)
    x = torch.randn(4, 16)
    want = _grads(torch, model, lambda m: m(x).square().mean(), backward_twice=True)
    offload = sluice.OffloadActivations(min_bytes=64, _host_executor=SMALL)
    got = _grads(torch, model, lambda m: m(x).square().mean(), offload, backward_twice=True)
    _assert_bitwise(torch, got, want)
    assert offload.last_step.fetched_bytes == 2 * offload.last_step.offloaded_bytes
    assert offload.live_steps == 0


def test_the_last_tensors_whose_copies_have_not_run_are_taken_from_the_device_not_copied_back():
    torch = torch_or_skip()
    offload = sluice.OffloadActivations(min_bytes=1, ahead=4, _host_executor={"lag": 1})
    keep = Keep(torch, offload)
    x = torch.zeros(2, requires_grad=True)
    with offload:
        y = x
        for k in range(6):
            y = keep.apply(y, torch.full((4,), float(k)))
    # Events done at their second look: the last copy to the host is still "running" as the forward
    # ends, so tensor 5 is taken where it lies and the copies back start at 4.
    assert [k for kind, k in offload._copies.log if kind == "h2d"] == [4, 3, 2]
    y.sum().backward()
    assert [k for kind, k in offload._copies.log if kind == "h2d"] == [4, 3, 2, 1, 0]
    assert [float(s[0][3][0]) for s, _ in keep.seen] == [0, 1, 2, 3, 4, 5]
    assert offload.last_step.fetched_bytes == 5 * 16


def test_tensors_taken_out_of_order_are_still_right():
    torch = torch_or_skip()
    offload = sluice.OffloadActivations(min_bytes=1, ahead=2, _host_executor={"lag": 5})
    keep = Keep(torch)
    x = torch.zeros(1, requires_grad=True)
    values = [torch.full((5,), float(k)) for k in range(6)]
    with offload:
        a = keep.apply(x, values[0], values[1])
        b = keep.apply(x, values[2])           # a branch: its backward and a's run in either order
        c = keep.apply(a + b, values[3], values[4], values[5])
    c.sum().backward()
    assert [[float(v[0]) for _, _, _, v in s] for s, _ in keep.seen] == [[0, 1], [2], [3, 4, 5]]


def test_the_forwards_tensor_is_held_until_its_copy_to_the_host_has_run():
    torch = torch_or_skip()
    offload = sluice.OffloadActivations(min_bytes=1, _host_executor={"lag": 2})
    keep = Keep(torch)
    x = torch.zeros(1, requires_grad=True)
    with offload:
        first = torch.full((64,), 7.0)
        address = first.data_ptr()
        y = keep.apply(x, first)
        del first
        held = [f.data_ptr() for _, f, _ in offload._reading]
        assert address in held  # its copy is "running": the memory must not return to the allocator
        for k in range(3):  # later saves look at the copy's event again; the third sees it done
            y = keep.apply(y, torch.full((64,), float(k)))
        assert address not in [f.data_ptr() for _, f, _ in offload._reading]
    y.sum().backward()
    assert torch.equal(keep.seen[0][0][0][3], torch.full((64,), 7.0))


def test_an_exception_in_forward_or_backward_leaves_the_pool_reusable():
    torch = torch_or_skip()
    model = _mlp(torch, depth=2)
    x = torch.randn(4, 16)
    offload = sluice.OffloadActivations(min_bytes=64, _host_executor=SMALL)
    want = _grads(torch, model, lambda m: m(x).sum())
    _grads(torch, model, lambda m: m(x).sum(), offload)
    pool, allocations = offload.pool_bytes, offload._copies.host_allocations

    def fails_in_forward(m):
        m(x)
        raise KeyError("forward")

    with pytest.raises(KeyError):
        _grads(torch, model, fails_in_forward, offload)

    class Boom(torch.autograd.Function):
        @staticmethod
        def forward(ctx, y):
            return y.clone()

        @staticmethod
        def backward(ctx, g):
            raise ValueError("backward")

    with pytest.raises(ValueError):
        _grads(torch, model, lambda m: Boom.apply(m(x)).sum(), offload)
    gc.collect()
    assert offload.live_steps == 0  # the failed steps' graphs are gone, and their buffers with them
    for _ in range(2):
        _assert_bitwise(torch, _grads(torch, model, lambda m: m(x).sum(), offload), want)
    assert (offload.pool_bytes, offload._copies.host_allocations) == (pool, allocations)


def test_a_second_with_nested_or_on_another_thread_is_refused():
    torch_or_skip()
    offload = sluice.OffloadActivations(_host_executor={})
    other = sluice.OffloadActivations(_host_executor={})
    errors = []

    def enter_elsewhere():
        try:
            with offload:
                pass
        except RuntimeError as e:
            errors.append(str(e))

    with offload:
        with pytest.raises(RuntimeError, match="already open on this thread"):
            with offload:
                pass
        with pytest.raises(RuntimeError, match="already open on this thread"):
            with other:
                pass
        t = threading.Thread(target=enter_elsewhere)
        t.start()
        t.join()
    assert len(errors) == 1 and "another thread" in errors[0]
    with offload:  # and it opens again, step after step
        pass
    with other:
        pass


def test_bad_options_are_refused_before_any_work():
    torch_or_skip()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="min_bytes"):
            sluice.OffloadActivations(min_bytes=bad, _host_executor={})
    for bad in (0, 31, 2.0):
        with pytest.raises(ValueError, match="ahead"):
            sluice.OffloadActivations(ahead=bad, _host_executor={})
    for bad in (0, -2, 1.5, True, "many"):
        with pytest.raises(ValueError, match="outgoing"):
            sluice.OffloadActivations(outgoing=bad, _host_executor={})
    if sluice.device_count() == 0:
        with pytest.raises(RuntimeError, match="no CUDA device"):
            sluice.OffloadActivations()


# On the GPU.

def _gpu_step(torch, model, inputs, targets, offload=None, bf16=False):
    import contextlib
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    model.zero_grad(set_to_none=True)
    with offload if offload is not None else contextlib.nullcontext(), autocast:
        loss = model(inputs, targets)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _gpu_gpt(torch):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from gpt import GPT
    finally:
        sys.path.remove(str(ROOT / "examples"))
    torch.manual_seed(0)
    model = GPT(vocab=512, seq=256, layers=4, heads=4, width=256).cuda()
    g = torch.Generator(device="cuda").manual_seed(1)
    inputs = torch.randint(0, 512, (8, 256), device="cuda", generator=g)
    targets = torch.randint(0, 512, (8, 256), device="cuda", generator=g)
    return model, inputs, targets


@gpu
@pytest.mark.parametrize("bf16", [False, True])
def test_gpu_gpt_gradients_equal_no_offload_bitwise(bf16):
    torch = torch_or_skip()
    model, inputs, targets = _gpu_gpt(torch)
    offload = sluice.OffloadActivations(min_bytes=1 << 16, device="cuda")
    for _ in range(3):
        want = _gpu_step(torch, model, inputs, targets, bf16=bf16)
        got = _gpu_step(torch, model, inputs, targets, offload, bf16=bf16)
        _assert_bitwise(torch, got, want)
    assert offload.last_step.offloaded_tensors > 20
    assert offload.live_steps == 0


@gpu
@pytest.mark.parametrize("gpu_behind", [False, True], ids=["gpu_keeping_up", "gpu_behind"])
def test_gpu_peak_memory_drops_and_the_pinned_pool_stops_growing(gpu_behind):
    # A GPU behind the host (a sleep before each step) must not raise the peak: past `outgoing`
    # tensors on their way out the forward waits for the oldest copy, so the tensors it saves while
    # the GPU sleeps do not pile up in device memory.
    torch = torch_or_skip()
    model, inputs, targets = _gpu_gpt(torch)
    _gpu_step(torch, model, inputs, targets)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    _gpu_step(torch, model, inputs, targets)
    plain = torch.cuda.max_memory_allocated() - base
    offload = sluice.OffloadActivations(min_bytes=1 << 16, device="cuda")
    pools = []
    for k in range(4):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        if gpu_behind:
            torch.cuda._sleep(100_000_000)  # about 50 ms of the GPU's clock: the host enqueues ahead of it
        _gpu_step(torch, model, inputs, targets, offload)
        torch.cuda.synchronize()
        pools.append(offload.pool_bytes)
    offloaded = torch.cuda.max_memory_allocated() - base
    assert offloaded < 0.7 * plain, (offloaded, plain)
    assert pools[1:] == pools[:1] * 3, pools
    assert offload.last_step.offloaded_bytes > 0.5 * plain


def _saved_then_changed_in_place(torch, offload, min_bytes, lag):
    """x -> a = x * 2 -> b = a.sin() (saves a) -> a.mul_(3) -> backward: plain torch refuses it."""
    x = torch.linspace(-1, 1, 4096, requires_grad=True)
    context = offload if offload is not None else _nothing()
    with context:
        a = x * 2
        b = a.sin()
        a.mul_(3)  # after sin saved it: its backward would read the changed values
    return b.sum()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("min_bytes, lag", [(1, 10**6), (1, 0), (1 << 30, 0)],
                         ids=["copy-out-still-running-as-the-forward-ends", "copy-out-seen-done-after-the-change", "kept-below-min-bytes"])
def test_a_saved_tensor_changed_in_place_raises_as_plain_torch_does(min_bytes, lag):
    torch = torch_or_skip()
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as plain:
        _saved_then_changed_in_place(torch, None, min_bytes, lag).backward()
    offload = sluice.OffloadActivations(min_bytes=min_bytes, _host_executor={"lag": lag, **SMALL})
    loss = _saved_then_changed_in_place(torch, offload, min_bytes, lag)
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as offloaded:
        loss.backward()
    assert "is at version 1; expected version 0" in str(plain.value)
    assert "is at version 1; expected version 0" in str(offloaded.value)
    # The pool is still usable after the refused backward: an unchanged step gives torch's gradients.
    del loss
    gc.collect()
    x = torch.linspace(-1, 1, 4096, requires_grad=True)
    with offload:
        y = (x * 2).sin().sum()
    y.backward()
    assert torch.equal(x.grad, 2 * torch.cos(torch.linspace(-1, 1, 4096) * 2))


def _changed_through_a_view_after_its_copy_ran(torch, offload):
    x = torch.linspace(-1, 1, 4096, requires_grad=True)
    with offload if offload is not None else _nothing():
        a = x * 2
        view = a[:10]
        b = a.sin()
        other = (x * 3).cos()  # a later save sees a's copy done: a's memory is let go
        del a
        view.mul_(3)  # a, changed through the view the loop kept
    return b.sum() + other.sum()


def test_a_saved_tensor_changed_through_a_view_after_its_copy_ran_raises_as_plain_torch_does():
    torch = torch_or_skip()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _changed_through_a_view_after_its_copy_ran(torch, None).backward()
    offload = sluice.OffloadActivations(min_bytes=1, _host_executor={"lag": 0, **SMALL})
    loss = _changed_through_a_view_after_its_copy_ran(torch, offload)
    assert not offload._reading or all(r.nbytes != 4096 * 4 for _, _, r in offload._reading)  # a's copy ran
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0"):
        loss.backward()


def test_the_version_watch_holds_none_of_the_tensors_memory():
    torch = torch_or_skip()
    offload = sluice.OffloadActivations(min_bytes=1, _host_executor={"lag": 0, **SMALL})
    x = torch.linspace(-1, 1, 4096, requires_grad=True)
    with offload:
        y = (x * 2).sin().cos()
    records = [r for step in offload._steps for r in step.records]
    assert records and all(r.watch is not None and r.watch.numel() == 0 for r in records)
    y.sum().backward()  # unchanged: no refusal
    assert x.grad is not None
