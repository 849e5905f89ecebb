"""sluice.StreamedLayers in training: the forward keeps no block's weights, the backward streams them in
again (last block first) and the gradients go to the host parameters' .grad, where an optimizer over
them steps them. Most tests run the ring on its host executor (_host_executor), where the blocks run the
same CPU kernels as the plain model, so losses, gradients and weights compare bitwise; the last ones run
on the GPU."""
import copy
import warnings

import pytest

import sluice
from conftest import gpu, torch_or_skip
from streamed_cases import HOST, Probe, _blocks, _gpu_blocks, _run


def _loss(blocks, x, order=None):
    return (_run(blocks, x, order) ** 2).mean()


def _xs(count, width=32):
    return [torch_or_skip().randn(4, width, generator=torch_or_skip().Generator().manual_seed(s)) for s in range(count)]


def _same(a, b):
    """The parameters of two module lists and their gradients, bitwise."""
    return all(torch_or_skip().equal(p, q) and (p.grad is None) == (q.grad is None)
               and (p.grad is None or torch_or_skip().equal(p.grad, q.grad)) for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("ahead", [1, 2, 6])
def test_training_steps_equal_the_blocks_resident_bitwise(ahead):
    torch = torch_or_skip()
    blocks = _blocks(torch)
    ref = copy.deepcopy(blocks)
    streamed = sluice.StreamedLayers(blocks, ahead=ahead, _host_executor=HOST)
    optimizers = [torch.optim.AdamW(b.parameters(), lr=1e-2) for b in (blocks, ref)]  # both over host tensors
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the forward, then the backward: the order the ring has
        for x in _xs(4):
            losses = [_loss(b, x) for b in (blocks, ref)]
            for loss in losses:
                loss.backward()
            assert torch.equal(*losses)
            assert all(not p.grad.is_cuda for p in blocks.parameters())
            assert _same(blocks, ref)
            for o in optimizers:
                o.step()
                o.zero_grad(set_to_none=True)
            assert _same(blocks, ref)  # the next forward streams the stepped weights
    with torch.no_grad():
        x = _xs(1)[0]
        assert torch.equal(_run(blocks, x), _run(ref, x))  # inference after training
    streamed.remove()


@pytest.mark.parametrize("set_to_none", [True, False])
def test_gradients_accumulate_over_backwards_as_autograd_accumulates_them(set_to_none):
    torch = torch_or_skip()
    blocks = _blocks(torch)
    ref = copy.deepcopy(blocks)
    streamed = sluice.StreamedLayers(blocks, ahead=2, _host_executor=HOST)
    for step in range(2):
        for x in _xs(3):  # three micro-batches, one backward each
            for b in (blocks, ref):
                _loss(b, x).backward()
        assert _same(blocks, ref)
        for b in (blocks, ref):
            b.zero_grad(set_to_none=set_to_none)
    x, y = _xs(2)
    for b in (blocks, ref):  # two forwards, one backward of both: the ring starts afresh for the second
        (_loss(b, x) + _loss(b, y)).backward()
    assert _same(blocks, ref)
    streamed.remove()


def test_frozen_parameters_get_no_gradient_and_the_others_theirs():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    for b in blocks:
        b[3].weight.requires_grad_(False)  # a frozen LayerNorm weight in every block
    blocks[1].requires_grad_(False)  # and a frozen block, that the backward runs through
    ref = copy.deepcopy(blocks)
    streamed = sluice.StreamedLayers(blocks, ahead=2, _host_executor=HOST)
    optimizers = [torch.optim.SGD([p for p in b.parameters() if p.requires_grad], lr=0.1) for b in (blocks, ref)]
    for x in _xs(3):
        for b, o in zip((blocks, ref), optimizers):
            _loss(b, x).backward()
        assert _same(blocks, ref)
        assert blocks[0][3].weight.grad is None and blocks[1][0].weight.grad is None
        assert blocks[0][0].weight.grad is not None
        for o in optimizers:
            o.step()
            o.zero_grad()
    assert _same(blocks, ref)
    streamed.remove()


def test_the_module_sees_the_rings_memory_in_a_recorded_forward_and_its_parameters_after():
    torch = torch_or_skip()
    blocks = Probe.blocks(torch, 4)
    host = [b.weight for b in blocks]
    streamed = sluice.StreamedLayers(blocks, ahead=1, _host_executor=HOST)
    out = _run(blocks, torch.zeros(1, requires_grad=True))
    for k, b in enumerate(blocks):
        assert [(w, bias) for w, bias, _ in b.seen] == [(k, -k)]
        assert b.seen[0][2] != host[k].data_ptr()  # it ran on the ring's copy
        assert b.weight is host[k] and b.weight.data_ptr() == host[k].data_ptr()
    out.sum().backward()
    streamed.remove()


def test_the_backward_holds_no_more_weights_than_the_rings_slots():
    # Autograd saves the weights a block's operations read; saved as they are, they would keep every
    # block's memory until the backward. They go as tokens and come back through the ring.
    torch = torch_or_skip()
    from sluice import streamed as module
    blocks = _blocks(torch, count=8)
    streamed = sluice.StreamedLayers(blocks, ahead=2, _host_executor=HOST)
    taken = []  # a weak reference to the memory of each block the ring hands over
    take = module._Ring.take

    def counting_take(ring):
        got = take(ring)
        taken.append(ring.last[1])
        return got

    def live():
        return sum(r() is not None for r in taken)

    module._Ring.take = counting_take
    try:
        seen = []
        for x in _xs(2):
            y = x
            for b in blocks:
                y = b(y)
                y.register_hook(lambda g: seen.append(live()))  # runs in the backward, as the block's turn comes
            after_forward = live()
            (y ** 2).mean().backward()
            assert after_forward <= 1, after_forward
    finally:
        module._Ring.take = take
    assert len(seen) == 16 and max(seen) <= streamed.ahead + 1, seen
    assert len(taken) == 2 * 2 * 8  # each block's weights streamed twice a step: the forward, the backward
    streamed.remove()


def test_an_exception_in_the_backward_leaves_the_blocks_usable():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    ref = copy.deepcopy(blocks)
    streamed = sluice.StreamedLayers(blocks, ahead=2, _host_executor=HOST)

    x, y = _xs(2)
    _backward_that_raises(blocks, x)
    for p in blocks.parameters():
        p.grad = None  # what autograd had put there before the exception, dropped
    for b in (blocks, ref):
        _loss(b, y).backward()
    assert _same(blocks, ref)
    with torch.no_grad():
        assert torch.equal(_run(blocks, x), _run(ref, x))
    streamed.remove()


def test_an_exception_in_a_recorded_forward_leaves_the_blocks_usable():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    ref = copy.deepcopy(blocks)
    failing = [True]

    def fail(module, args):
        if failing[0]:
            raise RuntimeError("boom")

    blocks[2][2].register_forward_pre_hook(fail)
    streamed = sluice.StreamedLayers(blocks, ahead=2, _host_executor=HOST)
    x = _xs(1)[0]
    with pytest.raises(RuntimeError, match="boom"):
        _loss(blocks, x)
    failing[0] = False
    for b in (blocks, ref):
        _loss(b, x).backward()
    assert _same(blocks, ref)
    streamed.remove()



class _Boom(Exception):
    pass


def _backward_that_raises(blocks, x):
    """A backward of blocks(x) that raises in its middle (blocks 5 and 4 done): its gradients dropped."""
    def fail(grad):
        raise _Boom()

    out = x
    for k, b in enumerate(blocks):
        out = b(out)
        if k == 3:
            out.register_hook(fail)
    with pytest.raises(_Boom):
        (out ** 2).mean().backward()


def _kept_on_the_device(torch, blocks=None, ahead=2):
    """Blocks (_blocks' unless given) streamed with grads="device" on the host executor, and a
    resident copy of them."""
    blocks = _blocks(torch) if blocks is None else blocks
    ref = copy.deepcopy(blocks)
    return blocks, ref, sluice.StreamedLayers(blocks, ahead=ahead, grads="device", _host_executor=HOST)


def _kept_equal(streamed, blocks, ref):
    """device_grads() lists blocks' parameters that ref has gradients for, in order, and equals them bitwise."""
    kept = streamed.device_grads()
    want = [(p, q.grad) for p, q in zip(blocks.parameters(), ref.parameters()) if q.grad is not None]
    return [p for p, _ in kept] == [p for p, _ in want] and all(
        torch_or_skip().equal(g, w) for (_, g), (_, w) in zip(kept, want))


def test_gradients_kept_on_the_device_leave_grad_alone_until_grads_to_host():
    torch = torch_or_skip()
    blocks, ref, streamed = _kept_on_the_device(torch)
    x = _xs(1)[0]
    for b in (blocks, ref):
        _loss(b, x).backward()
    assert all(p.grad is None for p in blocks.parameters())
    assert len(streamed.device_grads()) == len(list(blocks.parameters()))
    assert _kept_equal(streamed, blocks, ref)
    streamed.grads_to_host()
    assert streamed.device_grads() == []
    assert _same(blocks, ref)
    streamed.grads_to_host()  # nothing kept: nothing changes
    assert _same(blocks, ref)
    streamed.remove()


def test_gradients_kept_on_the_device_accumulate_over_backwards_and_add_to_grad():
    torch = torch_or_skip()
    blocks, ref, streamed = _kept_on_the_device(torch)
    x, y, z = _xs(3)
    for b in (blocks, ref):
        _loss(b, x).backward()
        _loss(b, y).backward()
    assert _kept_equal(streamed, blocks, ref)  # the sum of the two, as autograd made it
    streamed.grads_to_host()
    assert _same(blocks, ref)
    alone = copy.deepcopy(ref)  # z's gradients alone: what the next backward keeps
    alone.zero_grad(set_to_none=True)
    for b in (blocks, ref, alone):
        _loss(b, z).backward()
    assert _kept_equal(streamed, blocks, alone)
    streamed.grads_to_host()  # .grad holds x's and y's: z's are added to them
    assert _same(blocks, ref)
    streamed.remove()


def test_a_backward_that_raises_leaves_the_kept_gradients_as_they_were():
    torch = torch_or_skip()
    blocks, ref, streamed = _kept_on_the_device(torch)
    x, y, z = _xs(3)
    for b in (blocks, ref):
        _loss(b, x).backward()
    before = [(p, g.clone()) for p, g in streamed.device_grads()]
    _backward_that_raises(blocks, y)
    after = streamed.device_grads()
    assert [p for p, _ in after] == [p for p, _ in before]
    assert all(torch.equal(g, h) for (_, g), (_, h) in zip(after, before))
    for b in (blocks, ref):  # and the next backward adds to them
        _loss(b, z).backward()
    assert _kept_equal(streamed, blocks, ref)
    streamed.remove()


def test_one_gradient_tensor_given_to_two_parameters_is_kept_twice():
    # The backward of w1 + w2 hands both the same tensor: kept as one, adding to one would add to both.
    torch = torch_or_skip()

    class Sum(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = torch.nn.Parameter(torch.randn(4, 32))
            self.w2 = torch.nn.Parameter(torch.randn(4, 32))

        def forward(self, x):
            return x * (self.w1 + self.w2)

    torch.manual_seed(0)
    blocks, ref, streamed = _kept_on_the_device(torch, torch.nn.ModuleList([Sum() for _ in range(3)]), ahead=1)
    for x in _xs(2):
        for b in (blocks, ref):
            _loss(b, x).backward()
    assert _kept_equal(streamed, blocks, ref)
    streamed.remove()


def test_the_gradient_given_to_backward_is_left_as_it_was():
    # x + b hands b the output's gradient itself: kept as it is, the next backward would add to the
    # caller's tensor.
    torch = torch_or_skip()

    class Shift(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.b = torch.nn.Parameter(torch.randn(4, 32))

        def forward(self, x):
            return x + self.b

    torch.manual_seed(0)
    blocks, _, streamed = _kept_on_the_device(torch, torch.nn.ModuleList([Shift() for _ in range(2)]), ahead=1)
    given = [torch.full((4, 32), float(k + 1)) for k in range(2)]
    for g in given:
        out = _xs(1)[0]
        for b in blocks:
            out = b(out)
        out.backward(g)
    assert all(torch.equal(g, torch.full((4, 32), float(k + 1))) for k, g in enumerate(given))
    assert all(torch.equal(kept, torch.full((4, 32), 3.0)) for _, kept in streamed.device_grads())
    streamed.remove()


def test_a_bad_grads_value_is_refused_before_the_weights_move():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    where = [p.data_ptr() for p in blocks.parameters()]
    for grads in ("cuda", None, "Device"):
        with pytest.raises(ValueError, match="grads="):
            sluice.StreamedLayers(blocks, ahead=2, grads=grads, _host_executor=HOST)
    assert [p.data_ptr() for p in blocks.parameters()] == where
    assert all(not b._forward_pre_hooks for b in blocks)


def test_frozen_parameters_get_no_kept_gradient():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    for b in blocks:
        b[3].weight.requires_grad_(False)
    blocks[1].requires_grad_(False)
    ref = copy.deepcopy(blocks)
    streamed = sluice.StreamedLayers(blocks, ahead=2, grads="device", _host_executor=HOST)
    x = _xs(1)[0]
    for b in (blocks, ref):
        _loss(b, x).backward()
    kept = {id(p) for p, _ in streamed.device_grads()}
    assert kept == {id(p) for p in blocks.parameters() if p.requires_grad}
    assert _kept_equal(streamed, blocks, ref)
    streamed.grads_to_host()
    assert _same(blocks, ref)
    streamed.remove()


def test_remove_drops_the_kept_gradients():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    streamed = sluice.StreamedLayers(blocks, ahead=2, grads="device", _host_executor=HOST)
    _loss(blocks, _xs(1)[0]).backward()
    streamed.remove()
    assert streamed.device_grads() == []
    assert all(p.grad is None for p in blocks.parameters())


@gpu
def test_on_the_gpu_training_steps_equal_the_model_resident_bitwise():
    # The reference runs its forward and backward resident on the GPU (the same kernels), and its
    # optimizer on a host copy of its weights, as the streamed blocks' optimizer runs on theirs (the
    # CPU's SGD and the GPU's round differently), copied back onto the GPU after each step.
    torch = torch_or_skip()
    blocks = _gpu_blocks(torch, count=6, width=512)
    master = copy.deepcopy(blocks)
    ref = copy.deepcopy(blocks).cuda()
    streamed = sluice.StreamedLayers(blocks, ahead=2)
    optimizers = [torch.optim.SGD(b.parameters(), lr=0.05) for b in (blocks, master)]
    for step in range(3):
        xs = [torch.randn(8, 512, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        for x in xs:  # two micro-batches: the second backward adds to .grad
            losses = [_loss(b, x) for b in (blocks, ref)]
            for loss in losses:
                loss.backward()
            assert torch.equal(*losses), step
        for p, q, m in zip(blocks.parameters(), ref.parameters(), master.parameters()):
            assert p.grad.is_pinned() and not p.grad.is_cuda
            assert torch.equal(p.grad, q.grad.cpu()), float((p.grad.float() - q.grad.float().cpu()).abs().max())
            m.grad = q.grad.cpu()
        for o in optimizers:
            o.step()
            o.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        with torch.no_grad():
            for q, m in zip(ref.parameters(), master.parameters()):
                q.copy_(m)
        assert all(torch.equal(p, m) for p, m in zip(blocks.parameters(), master.parameters()))
    streamed.remove()



@gpu
def test_on_the_gpu_gradients_kept_on_the_device_equal_the_model_resident_bitwise():
    torch = torch_or_skip()
    blocks = _gpu_blocks(torch, count=6, width=512)
    ref = copy.deepcopy(blocks).cuda()
    streamed = sluice.StreamedLayers(blocks, ahead=2, grads="device")
    for x in [torch.randn(8, 512, device="cuda", dtype=torch.bfloat16) for _ in range(2)]:
        for b in (blocks, ref):  # two micro-batches: the second backward adds to the kept gradients
            _loss(b, x).backward()
    kept = streamed.device_grads()
    assert [p for p, _ in kept] == list(blocks.parameters())
    assert all(p.grad is None for p in blocks.parameters())
    for (p, g), q in zip(kept, ref.parameters()):
        assert g.is_cuda and g.device.index == streamed.device
        assert torch.equal(g, q.grad), float((g.float() - q.grad.float()).abs().max())
    streamed.grads_to_host()
    assert streamed.device_grads() == []
    for p, q in zip(blocks.parameters(), ref.parameters()):
        assert not p.grad.is_cuda and torch.equal(p.grad, q.grad.cpu())
    streamed.remove()


@gpu
def test_on_the_gpu_kept_gradients_made_on_a_side_stream_are_ready_on_the_callers():
    # The forward and backward on a stream of their own, held back by a long kernel: device_grads()
    # and grads_to_host() on the default stream must wait for them there.
    torch = torch_or_skip()
    blocks = _gpu_blocks(torch, count=4, width=512)
    ref = copy.deepcopy(blocks).cuda()
    streamed = sluice.StreamedLayers(blocks, ahead=1, grads="device")
    x = torch.randn(8, 512, device="cuda", dtype=torch.bfloat16)
    _loss(ref, x).backward()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # about 0.1 s of the GPU's clock: the backward's kernels come after it
        _loss(blocks, x).backward()
    kept = streamed.device_grads()
    assert all(torch.equal(g, q.grad) for (_, g), q in zip(kept, ref.parameters()))
    streamed.grads_to_host()
    assert all(torch.equal(p.grad, q.grad.cpu()) for p, q in zip(blocks.parameters(), ref.parameters()))
    streamed.remove()


@gpu
def test_on_the_gpu_the_backward_holds_the_rings_slots_and_the_gradients_of_a_block_or_two():
    torch = torch_or_skip()
    blocks = _gpu_blocks(torch, count=8, width=2048)  # 64 MiB a block, built on the host
    block_bytes = sum(p.numel() * p.element_size() for p in blocks[0].parameters())
    x = torch.randn(8, 2048, device="cuda", dtype=torch.bfloat16)
    streamed = sluice.StreamedLayers(blocks, ahead=2)
    _loss(blocks, x).backward()  # warm: cuBLAS's workspace, the pools
    blocks.zero_grad(set_to_none=True)

    def ring_pool():  # the ring's slots live in the device's default pool (cudaMallocAsync), apart from torch's
        return sluice._sluice._ring_pool_memory(streamed.device)

    loss = _loss(blocks, x)
    torch.cuda.synchronize()
    before, pool_before = torch.cuda.memory_allocated(), ring_pool()["used"]
    torch.cuda.reset_peak_memory_stats()
    sluice._sluice._ring_pool_memory(streamed.device, reset=True)
    loss.backward()
    torch.cuda.synchronize()
    grads = torch.cuda.max_memory_allocated() - before
    # Kept on the device, the gradients alone would take 8 blocks. Here: the block's gradients being
    # made and the block's before being copied out, the activations' gradients (a few MiB).
    assert grads <= 2 * block_bytes + (16 << 20), (grads, block_bytes)
    assert ring_pool()["used_high"] - pool_before <= streamed.device_bytes + 3 * (2 << 20)
    assert all(p.grad is not None and not p.grad.is_cuda for p in blocks.parameters())
    streamed.remove()


# Every way PyTorch users take gradients, with the same values and the same hooks as the resident blocks.

def _masks(torch, blocks):
    """A pruning mask for each Linear weight: about half of its entries masked."""
    g = torch.Generator().manual_seed(5)
    return [torch.rand(m.weight.shape, generator=g) > 0.5 for m in blocks.modules() if isinstance(m, torch.nn.Linear)]


def _masked(torch, blocks, masks, seen):
    """Hooks on each Linear weight that mask its gradient (a pruning mask) and record what they got."""
    linears = [m for m in blocks.modules() if isinstance(m, torch.nn.Linear)]
    handles = []
    for k, (m, mask) in enumerate(zip(linears, masks)):
        def hook(grad, k=k, mask=mask):
            seen.append((k, grad.clone()))
            return grad * mask
        handles.append(m.weight.register_hook(hook))
    return handles


@pytest.mark.parametrize("hooked", ["before", "after"])
def test_hooks_on_streamed_parameters_run_as_on_the_resident_ones(hooked):
    torch = torch_or_skip()
    blocks = _blocks(torch)
    ref = copy.deepcopy(blocks)
    masks = _masks(torch, blocks)
    seen, seen_ref = [], []
    if hooked == "before":  # hooks the caller placed before streaming, and after
        _masked(torch, blocks, masks, seen)
    streamed = sluice.StreamedLayers(blocks, ahead=2, _host_executor=HOST)
    if hooked == "after":
        _masked(torch, blocks, masks, seen)
    _masked(torch, ref, masks, seen_ref)
    for x in _xs(2):
        for b in (blocks, ref):
            _loss(b, x).backward()
    assert _same(blocks, ref)
    linears = [m for m in blocks.modules() if isinstance(m, torch.nn.Linear)]
    masked = sum(int((~mask).sum()) for mask in masks)
    assert masked > 0 and all(torch.all(m.weight.grad[~mask] == 0) for m, mask in zip(linears, masks))
    assert sorted(k for k, _ in seen) == sorted(k for k, _ in seen_ref) and len(seen) == 2 * len(masks)
    by_k = {}
    for k, g in seen_ref:
        by_k.setdefault(k, []).append(g)
    for k, g in seen:  # each hook got the gradient the resident one got
        assert any(torch.equal(g, h) for h in by_k[k]), k
    streamed.remove()


def test_post_accumulate_grad_hooks_run_once_grad_is_set():
    torch = torch_or_skip()
    if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
        pytest.skip(f"torch {torch.__version__} has no register_post_accumulate_grad_hook (2.1 and later)")
    blocks = _blocks(torch)
    ref = copy.deepcopy(blocks)
    streamed = sluice.StreamedLayers(blocks, ahead=2, _host_executor=HOST)
    got = {}
    for name, b in (("streamed", blocks), ("ref", ref)):
        got[name] = []
        for p in b.parameters():
            p.register_post_accumulate_grad_hook(lambda p, out=got[name]: out.append(p.grad.clone()))
    x = _xs(1)[0]
    for b in (blocks, ref):
        _loss(b, x).backward()
    assert len(got["streamed"]) == len(got["ref"]) == len(list(ref.parameters()))
    for g in got["streamed"]:
        assert any(torch.equal(g, h) for h in got["ref"])
    streamed.remove()


def test_autograd_grad_returns_the_gradients_and_leaves_grad_alone():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    ref = copy.deepcopy(blocks)
    streamed = sluice.StreamedLayers(blocks, ahead=2, _host_executor=HOST)
    x = _xs(1)[0]
    params = list(blocks.parameters())
    got = torch.autograd.grad(_loss(blocks, x), params)
    want = torch.autograd.grad(_loss(ref, x), list(ref.parameters()))
    assert all(p.grad is None for p in params)  # as plain autograd: .grad untouched
    assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want))
    # A subset, and the input's gradient beside it.
    xi, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    some = [blocks[1][0].weight, blocks[4][2].bias]
    got = torch.autograd.grad(_loss(blocks, xi), [xi] + some)
    want = torch.autograd.grad(_loss(ref, xr), [xr, ref[1][0].weight, ref[4][2].bias])
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert all(p.grad is None for p in params)
    # Then a plain backward after them still fills .grad as the resident one does.
    for b in (blocks, ref):
        _loss(b, x).backward()
    assert _same(blocks, ref)
    streamed.remove()


def test_backward_with_inputs_fills_only_those_given():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    ref = copy.deepcopy(blocks)
    streamed = sluice.StreamedLayers(blocks, ahead=2, _host_executor=HOST)
    x = _xs(1)[0]
    _loss(blocks, x).backward(inputs=[blocks[2][0].weight, blocks[5][3].weight])
    _loss(ref, x).backward(inputs=[ref[2][0].weight, ref[5][3].weight])
    assert _same(blocks, ref)
    assert sum(p.grad is not None for p in blocks.parameters()) == 2
    streamed.remove()


def test_a_block_called_twice_in_a_forward_gets_the_sum_of_both_gradients():
    torch = torch_or_skip()
    blocks = _blocks(torch, count=3)
    ref = copy.deepcopy(blocks)
    streamed = sluice.StreamedLayers(blocks, ahead=1, _host_executor=HOST)
    x = _xs(1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the order breaks: the ring starts afresh
        for b in (blocks, ref):
            _loss(b, x, order=[0, 1, 1, 2]).backward()
    assert _same(blocks, ref)
    streamed.remove()
    assert all(not p._backward_hooks for p in blocks.parameters())  # remove() takes its hooks away


# The gradients' copies to the host run on sluice's ring to the host; on the host executor it
# checks every edge as each copy starts.

class _RecordingCopies:
    """sluice's _CopiesToHost, recording what it was given and what its checks found."""
    made = []
    original = sluice._sluice._CopiesToHost

    def __init__(self, device, ahead):
        self.inner = _RecordingCopies.original(device, ahead)
        self.ahead, self.puts, self.violations, self.checked = ahead, 0, None, 0
        _RecordingCopies.made.append(self)

    def put(self, *args):
        self.puts += 1
        return self.inner.put(*args)

    def wait(self, position):
        self.inner.wait(position)

    @property
    def drained(self):
        return self.inner.drained

    def finish(self):
        self.inner.finish()
        self.violations, self.checked = self.inner._violations(), self.inner._checked()

    def stop(self):
        self.inner.stop()


def test_each_backwards_gradients_go_to_the_host_through_the_ring_every_edge_kept(monkeypatch):
    torch = torch_or_skip()
    monkeypatch.setattr(sluice._sluice, "_CopiesToHost", _RecordingCopies)
    _RecordingCopies.made = []
    blocks = _blocks(torch)
    ref = copy.deepcopy(blocks)
    streamed = sluice.StreamedLayers(blocks, ahead=2, _host_executor=HOST)
    trained = sum(p.requires_grad for p in blocks.parameters())
    for x in _xs(3):
        for b in (blocks, ref):
            _loss(b, x).backward()
        assert _same(blocks, ref)
    assert len(_RecordingCopies.made) == 3  # a ring a backward, each finished at its end
    per_block = max(len(list(b.parameters())) for b in blocks)
    for ring in _RecordingCopies.made:
        assert ring.puts == trained and ring.ahead == per_block
        assert ring.violations == [] and ring.checked >= 3 * trained  # mark, copy, ready and drain, each checked
    streamed.remove()


def test_copies_to_the_host_arrive_whole_and_a_position_not_put_is_refused():
    torch = torch_or_skip()
    g = torch.Generator().manual_seed(1)
    sources = [torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8) for n in (1, 4096, 0, 777, 65536, 3)]
    hosts = [torch.full((s.numel(),), 0xEE, dtype=torch.uint8) for s in sources]
    copies = sluice._sluice._CopiesToHost(-1, 2)
    positions = [copies.put(0, s.data_ptr(), s.numel(), h.data_ptr()) for s, h in zip(sources, hosts)]
    assert positions == list(range(len(sources)))
    copies.wait(positions[-1])
    assert copies.drained == len(sources)
    assert all(torch.equal(s, h) for s, h in zip(sources, hosts))
    with pytest.raises(RuntimeError, match="was not put"):
        copies.wait(len(sources))
    copies.finish()
    assert copies._violations() == [] and copies._checked() >= 4 * len(sources)
    with pytest.raises(RuntimeError, match="after"):
        copies.put(0, sources[0].data_ptr(), 1, hosts[0].data_ptr())


def test_each_host_grad_is_the_tensor_the_ring_copied_into_not_a_copy_of_it(monkeypatch):
    # AccumulateGrad keeps a gradient it alone holds and copies one held elsewhere (on a GPU, into
    # memory that is not page-locked): the ring lets go of each host gradient once WaitCopy has
    # waited for its copy, so that .grad is the ring's own tensor.
    torch = torch_or_skip()
    from sluice import streamed_training
    written, original = set(), streamed_training._copy_to_host

    def recording(*args):
        host = original(*args)
        written.add(host.data_ptr())
        return host
    monkeypatch.setattr(streamed_training, "_copy_to_host", recording)
    blocks = _blocks(torch)
    streamed = sluice.StreamedLayers(blocks, ahead=2, _host_executor=HOST)
    _loss(blocks, _xs(1)[0]).backward()
    grads = [p.grad for p in blocks.parameters() if p.requires_grad]
    assert grads and all(g.data_ptr() in written for g in grads)
    streamed.remove()
