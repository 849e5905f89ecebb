"""Every value and every gradient of sluice's Python products equal plain PyTorch's, bit for bit, over
a grid of models and iterables, on the GPU: Prefetcher against `.cuda()` of each batch as the
iterable gave it, StreamedLayers in training against the same blocks resident (every way users take
gradients), OffloadActivations against the step without it. Where there is no GPU they skip; the
host executor's versions of the same checks are in test_prefetch.py, test_streamed_training.py and
test_activations.py."""
import copy
import sys

import pytest

import sluice
from conftest import ROOT, gpu, torch_or_skip
from streamed_cases import _blocks

pytestmark = gpu


# Prefetcher: each batch equals the plain copy of what the iterable gave, at the time it gave it.

def _fresh(torch, count):
    g = torch.Generator().manual_seed(1)
    for k in range(count):
        n = 1 + (k * 5) % 9
        yield {"x": torch.rand(n, 3, 17, generator=g), "ids": torch.randint(0, 1 << 40, (n,), generator=g),
               "pair": (torch.rand(n, generator=g).to(torch.bfloat16), torch.full((2, n), k, dtype=torch.int16))}


def _refilled(torch, count, pinned):
    """One set of buffers, refilled in place and yielded again each time (page-locked or not)."""
    x = torch.empty(64, 1024)
    ids = torch.empty(64, dtype=torch.int64)
    if pinned:
        x, ids = x.pin_memory(), ids.pin_memory()
    for k in range(count):
        x.copy_(torch.arange(64 * 1024, dtype=torch.float32).reshape(64, 1024) + k)
        ids.fill_(k)
        yield {"x": x, "ids": ids}


def _numpy(count):
    np = pytest.importorskip("numpy")
    buffer = np.empty((32, 333), dtype=np.float16)
    for k in range(count):
        buffer[:] = np.float16(k) / 7
        yield buffer


def _loader(torch):
    from torch.utils.data import DataLoader, TensorDataset
    x = torch.rand(192, 3, 8, 8)
    y = torch.arange(192)
    return DataLoader(TensorDataset(x, y), batch_size=32, num_workers=2, pin_memory=True)


def _leaves(torch, batch):
    if isinstance(batch, dict):
        return [leaf for v in batch.values() for leaf in _leaves(torch, v)]
    if isinstance(batch, (tuple, list)):
        return [leaf for v in batch for leaf in _leaves(torch, v)]
    return [batch if isinstance(batch, torch.Tensor) else torch.from_numpy(batch)]


class _Recorded:
    """The iterable's batches, each copied to the GPU plainly the moment the iterable yields it."""

    def __init__(self, torch, source):
        self.torch, self.source, self.plain = torch, source, []

    def __iter__(self):
        for batch in self.source:
            self.plain.append([leaf.cuda() for leaf in _leaves(self.torch, batch)])
            yield batch


@pytest.mark.parametrize("thread", [True, False])
@pytest.mark.parametrize("ahead", [1, 3])
@pytest.mark.parametrize("source", ["fresh", "refilled", "refilled-pinned", "numpy", "dataloader"])
def test_prefetcher_batches_equal_the_plain_copies(source, ahead, thread):
    torch = torch_or_skip()
    make = {"fresh": lambda: _fresh(torch, 24), "refilled": lambda: _refilled(torch, 24, False),
            "refilled-pinned": lambda: _refilled(torch, 24, True), "numpy": lambda: _numpy(24),
            "dataloader": lambda: _loader(torch)}[source]
    recorded = _Recorded(torch, make())
    got = []
    for batch in sluice.Prefetcher(recorded, ahead=ahead, thread=thread):
        got.append([leaf.clone() for leaf in _leaves(torch, batch)])
    torch.cuda.synchronize()
    assert len(got) == len(recorded.plain) > 0
    for k, (g, want) in enumerate(zip(got, recorded.plain)):
        assert len(g) == len(want)
        for a, b in zip(g, want):
            assert a.is_cuda and a.dtype == b.dtype and a.shape == b.shape, k
            assert torch.equal(a.view(torch.uint8) if a.dtype == torch.bfloat16 else a, b.view(torch.uint8) if b.dtype == torch.bfloat16 else b), k


@pytest.mark.parametrize("thread", [True, False])
def test_prefetcher_left_early_over_an_iterator_yields_every_batch_once_in_order(thread):
    torch = torch_or_skip()
    recorded = _Recorded(torch, _refilled(torch, 30, False))
    source = iter(recorded)
    p = sluice.Prefetcher(source, ahead=3, thread=thread)
    got = []
    for leave_at in (4, 9, 10, None):
        for batch in p:
            got.append(batch["x"].clone())
            if len(got) == leave_at:
                break
    torch.cuda.synchronize()
    assert len(got) == len(recorded.plain) == 30
    assert all(torch.equal(g, want[0]) for g, want in zip(got, recorded.plain))


# StreamedLayers in training: the same gradients, through the same hooks, as the blocks resident.

def _gpt_blocks(torch):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from gpt import GPT
    finally:
        sys.path.remove(str(ROOT / "examples"))
    torch.manual_seed(0)
    return GPT(vocab=128, seq=64, layers=4, heads=4, width=128).blocks


def _models(torch, name):
    if name == "mlp-fp32":
        return _blocks(torch, count=5, width=256), lambda: torch.randn(16, 256, device="cuda")
    if name == "mlp-bf16":
        return _blocks(torch, count=5, width=256).to(torch.bfloat16), \
            lambda: torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
    return _gpt_blocks(torch), lambda: torch.randn(4, 64, 128, device="cuda")


def _loss(blocks, x):
    for b in blocks:
        x = b(x)
    return (x.float() ** 2).mean()


def _masks(torch, blocks):
    g = torch.Generator().manual_seed(7)
    return {name: torch.rand(p.shape, generator=g) > 0.3 for name, p in blocks.named_parameters() if p.dim() == 2}


def _hook(blocks, masks, device):
    for name, p in blocks.named_parameters():
        if name in masks:
            mask = masks[name].to(device)
            p.register_hook(lambda g, mask=mask: g * mask)


@pytest.mark.parametrize("how", ["backward", "backward-twice", "autograd.grad", "hooks", "inputs"])
@pytest.mark.parametrize("model", ["mlp-fp32", "mlp-bf16", "gpt"])
def test_streamed_layers_gradients_equal_the_resident_blocks(model, how):
    torch = torch_or_skip()
    blocks, make_input = _models(torch, model)
    ref = copy.deepcopy(blocks).cuda()
    if how == "hooks":
        masks = _masks(torch, blocks)
        _hook(blocks, masks, "cpu")
        _hook(ref, masks, "cuda")
    streamed = sluice.StreamedLayers(blocks, ahead=2)
    params, ref_params = list(blocks.parameters()), list(ref.parameters())
    torch.manual_seed(3)
    xs = [make_input() for _ in range(2 if how == "backward-twice" else 1)]
    if how == "autograd.grad":
        got = torch.autograd.grad(_loss(blocks, xs[0]), params)
        want = torch.autograd.grad(_loss(ref, xs[0]), ref_params)
        assert all(p.grad is None for p in params)
    else:
        some = slice(1, None, 3) if how == "inputs" else slice(None)
        for x in xs:
            for b, ps in ((blocks, params), (ref, ref_params)):
                loss = _loss(b, x)
                loss.backward(inputs=ps[some]) if how == "inputs" else loss.backward()
        got = [p.grad for p in params]
        want = [q.grad for q in ref_params]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if g is not None:
            assert not g.is_cuda and torch.equal(g, w.cpu()), float((g.float() - w.float().cpu()).abs().max())
    streamed.remove()


# OffloadActivations: the step's gradients equal the step without it; an in-place change is refused as torch refuses it.

def _gpt(torch):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from gpt import GPT
    finally:
        sys.path.remove(str(ROOT / "examples"))
    torch.manual_seed(0)
    return GPT(vocab=256, seq=128, layers=3, heads=4, width=128).cuda()


@pytest.mark.parametrize("min_bytes", [1, 1 << 16])
@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("model", ["mlp", "gpt"])
def test_offloaded_activations_gradients_equal_the_step_without(model, autocast, min_bytes):
    torch = torch_or_skip()
    if model == "mlp":
        net = _blocks(torch, count=4, width=512).cuda()
        inputs = torch.randn(64, 512, device="cuda")
        step = lambda: _loss(net, inputs)  # noqa: E731
    else:
        net = _gpt(torch)
        g = torch.Generator(device="cuda").manual_seed(1)
        ids = torch.randint(0, 256, (4, 128), device="cuda", generator=g)
        targets = torch.randint(0, 256, (4, 128), device="cuda", generator=g)
        step = lambda: net(ids, targets)  # noqa: E731 - the mean cross-entropy
    offload = sluice.OffloadActivations(min_bytes=min_bytes, device="cuda")

    def run(with_offload):
        net.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            if with_offload:
                with offload:
                    loss = step()
            else:
                loss = step()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in net.parameters()]

    for _ in range(2):
        want, got = run(False), run(True)
        assert torch.equal(got[0], want[0])
        assert all(torch.equal(g, w) for g, w in zip(got[1], want[1]))
    assert offload.live_steps == 0


def test_offloaded_activations_refuse_a_saved_tensor_changed_in_place_as_torch_does():
    torch = torch_or_skip()
    x = torch.randn(1 << 20, device="cuda", requires_grad=True)

    def step():
        a = x * 2
        b = a.sin()
        a.mul_(3)  # after sin saved it: plain torch's backward refuses it
        return b.sum()

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        step().backward()
    offload = sluice.OffloadActivations(min_bytes=1, device="cuda")
    with offload:
        loss = step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def _run_order(blocks, x, order):
    for k in order:
        x = blocks[k](x)
    return (x.float() ** 2).mean()


@pytest.mark.parametrize("case", ["block-called-twice", "retain-graph-twice", "forwards-then-backwards",
                                  "host-term-on-a-parameter"])
def test_streamed_layers_gradients_summed_from_several_uses_equal_the_resident_blocks(case):
    """Gradients that autograd adds on the host before .grad (a parameter used twice in a graph,
    two backwards over one graph, two graphs alive at once, a term on the host parameter itself)."""
    torch = torch_or_skip()
    import warnings
    blocks = _blocks(torch, count=4, width=256)
    ref = copy.deepcopy(blocks).cuda()
    streamed = sluice.StreamedLayers(blocks, ahead=2)
    torch.manual_seed(4)
    xs = [torch.randn(16, 256, device="cuda") for _ in range(2)]
    order = [0, 1, 1, 2, 3] if case == "block-called-twice" else [0, 1, 2, 3]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an order broken on purpose: the ring starts afresh
        for b in (blocks, ref):
            if case == "forwards-then-backwards":
                losses = [_run_order(b, x, order) for x in xs]
                for loss in losses:
                    loss.backward()
            elif case == "retain-graph-twice":
                loss = _run_order(b, xs[0], order)
                loss.backward(retain_graph=True)
                loss.backward()
            elif case == "host-term-on-a-parameter":
                w = b[1][0].weight
                loss = _run_order(b, xs[0], order) + (w.float() ** 2).sum().to(w.device) * 1e-3
                loss.backward()
            else:
                _run_order(b, xs[0], order).backward()
    for p, q in zip(blocks.parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            assert torch.equal(p.grad, q.grad.cpu()), float((p.grad.float() - q.grad.float().cpu()).abs().max())
    streamed.remove()
