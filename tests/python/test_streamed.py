"""sluice.StreamedLayers: a model's blocks with their weights streamed in. Most tests run the ring on its
host executor (_host_executor), where the weights arrive as CPU tensors and the blocks run the same CPU
kernels as the plain model, so outputs compare bitwise; the last ones run on the GPU."""
import copy
import gc
import threading
import warnings
import weakref

import pytest

import sluice
from conftest import gpu, torch_or_skip
from streamed_cases import HOST, Probe, _blocks, _gpu_blocks, _plain, _run


@pytest.mark.parametrize("ahead", [1, 2, 5])
def test_forwards_in_a_row_equal_the_blocks_run_plainly_bitwise(ahead):
    torch = torch_or_skip()
    blocks = _blocks(torch)
    xs = [torch.randn(4, 32, generator=torch.Generator().manual_seed(s)) for s in range(5)]
    want = [_plain(torch, blocks, x) for x in xs]
    streamed = sluice.StreamedLayers(blocks, ahead=ahead, _host_executor=HOST)
    for mode in (torch.no_grad, torch.inference_mode):
        for x, w in zip(xs, want):
            with mode():
                assert torch.equal(_run(blocks, x), w)
    assert streamed._training is None  # inference takes nothing of the training path
    streamed.remove()


def test_each_block_runs_with_its_own_weights_on_the_rings_memory_and_gives_them_back():
    torch = torch_or_skip()
    blocks = Probe.blocks(torch, 5)
    streamed = sluice.StreamedLayers(blocks, ahead=2, _host_executor=HOST)
    host = [b.weight.data_ptr() for b in blocks]
    with torch.no_grad():
        for _ in range(3):
            _run(blocks, torch.zeros(1))
    for k, b in enumerate(blocks):
        assert [(w, bias) for w, bias, _ in b.seen] == [(k, -k)] * 3
        assert all(ptr != host[k] for _, _, ptr in b.seen)  # it ran on the ring's copy, not the host's
        assert b.weight.data_ptr() == host[k]  # and is back on the host copy after
        assert not b.weight.is_cuda
    streamed.remove()


def test_blocks_called_out_of_order_get_their_own_weights_and_the_next_forward_is_right():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    x = torch.randn(4, 32)
    order = [0, 1, 3, 2, 2, 5, 0]
    want_odd, want = _plain(torch, blocks, x, order), _plain(torch, blocks, x)
    streamed = sluice.StreamedLayers(blocks, _host_executor=HOST)
    with torch.no_grad():
        assert torch.equal(_run(blocks, x), want)
        with pytest.warns(RuntimeWarning, match="block 3 was called where block 2 was next"):
            assert torch.equal(_run(blocks, x, order), want_odd)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once
            assert torch.equal(_run(blocks, x, order), want_odd)
        for _ in range(2):
            assert torch.equal(_run(blocks, x), want)
    streamed.remove()


def test_a_forward_abandoned_by_an_exception_hangs_nothing_and_the_next_forward_is_right():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    x = torch.randn(4, 32)
    want = _plain(torch, blocks, x)

    class Boom(Exception):
        pass

    def fail(module, args):
        if failing:
            raise Boom()

    failing = True
    blocks[3][2].register_forward_pre_hook(fail)  # inside block 3, with its weights on the ring's memory
    streamed = sluice.StreamedLayers(blocks, ahead=2, _host_executor=HOST)
    outcome = {}

    def loop():
        nonlocal failing
        with torch.no_grad():
            try:
                _run(blocks, x)
            except Boom:
                outcome["raised"] = True
            failing = False
            outcome["after"] = [torch.equal(_run(blocks, x), want) for _ in range(3)]

    runner = threading.Thread(target=loop, daemon=True)
    runner.start()
    runner.join(20)
    assert not runner.is_alive(), "a forward hangs after one was abandoned"
    assert outcome == {"raised": True, "after": [True, True, True]}
    streamed.remove()


def test_a_weight_kept_past_its_block_keeps_its_values():
    torch = torch_or_skip()
    blocks = Probe.blocks(torch, 3)
    kept = []
    blocks[1].register_forward_hook(lambda m, a, o: kept.append(m.weight.data))  # a view of the ring's memory
    streamed = sluice.StreamedLayers(blocks, ahead=1, _host_executor=HOST)
    with torch.no_grad():
        for _ in range(4):
            _run(blocks, torch.zeros(1))
    assert [float(t[0, 0]) for t in kept] == [1.0] * 4  # not overwritten by the blocks copied after it
    streamed.remove()


def test_a_streamed_model_let_go_is_collected_and_its_ring_stopped():
    # The exit-time finalizer reaches the ring; a ring that held its owner kept it (its
    # page-locked weights and device slots) until the process ended.
    torch = torch_or_skip()
    blocks = _blocks(torch)
    streamed = sluice.StreamedLayers(blocks, _host_executor=HOST)
    with torch.no_grad():
        _run(blocks, torch.randn(2, 32))
    gone = weakref.ref(streamed)
    del streamed, blocks
    gc.collect()
    assert gone() is None


def test_the_budget_picks_ahead_and_the_device_bytes():
    torch = torch_or_skip()
    blocks = _blocks(torch, count=6, width=32)
    # A block: Linear(32, 128) + Linear(128, 32) + LayerNorm(32), float32, each tensor at a 256-byte offset.
    sizes = [128 * 32 * 4, 128 * 4, 32 * 128 * 4, 32 * 4, 32 * 4, 32 * 4]
    block = 0
    for s in sizes:
        block = (block + 255) // 256 * 256 + s
    s = sluice.StreamedLayers(blocks, budget_bytes=3 * block + block // 2, _host_executor=HOST)
    assert (s.ahead, s.device_bytes) == (2, 3 * block)
    s.remove()
    s = sluice.StreamedLayers(blocks, _host_executor=HOST)
    assert (s.ahead, s.device_bytes) == (1, 2 * block)  # no budget: one block ahead
    s.remove()
    s = sluice.StreamedLayers(blocks, budget_bytes=1 << 40, _host_executor=HOST)
    assert s.ahead == len(blocks)  # no more than a forward's blocks ahead
    s.remove()
    with pytest.raises(ValueError, match="ahead=3 needs"):
        sluice.StreamedLayers(blocks, budget_bytes=3 * block, ahead=3, _host_executor=HOST)


def test_a_budget_below_two_blocks_is_refused_before_any_work():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    before = [p.data_ptr() for p in blocks.parameters()]
    with pytest.raises(ValueError, match="cannot hold the 2 device slots"):
        sluice.StreamedLayers(blocks, budget_bytes=1 << 10, _host_executor=HOST)
    assert [p.data_ptr() for p in blocks.parameters()] == before
    assert all(not b._forward_pre_hooks for b in blocks)


def test_a_forward_with_grad_over_frozen_blocks_gives_the_inputs_gradient_of_the_blocks_run_plainly():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    blocks.requires_grad_(False)
    ref = copy.deepcopy(blocks)
    x = torch.randn(4, 32)
    xs = x.clone().requires_grad_(), x.clone().requires_grad_()
    streamed = sluice.StreamedLayers(blocks, _host_executor=HOST)
    _run(blocks, xs[0]).sum().backward()  # autograd saves the blocks' weights: they must be streamed in again
    _run(ref, xs[1]).sum().backward()
    assert torch.equal(xs[0].grad, xs[1].grad)
    assert torch.equal(_run(blocks, x), _plain(torch, ref, x))  # grad enabled, nothing asks for it
    streamed.remove()


def test_bad_blocks_are_refused():
    torch = torch_or_skip()
    lin = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="at least one block"):
        sluice.StreamedLayers([], _host_executor=HOST)
    with pytest.raises(ValueError, match="appears twice"):
        sluice.StreamedLayers([lin, lin], _host_executor=HOST)
    with pytest.raises(ValueError, match="share a parameter"):
        sluice.StreamedLayers([lin, torch.nn.Sequential(lin)], _host_executor=HOST)
    with pytest.raises(TypeError, match="not a torch.nn.Module"):
        sluice.StreamedLayers([lin, 3], _host_executor=HOST)
    with pytest.raises(ValueError, match="ahead must be 1 to 30"):
        sluice.StreamedLayers([lin], ahead=0, _host_executor=HOST)


def test_converting_the_model_moves_buffers_keeps_the_weights_streamed_and_refuses_a_dtype_change():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    for b in blocks:
        b.register_buffer("scale", torch.ones(2, dtype=torch.float64))
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), *blocks)
    x = torch.randn(4, 32)
    want = _plain(torch, model, x)
    streamed = sluice.StreamedLayers(blocks, _host_executor=HOST)
    host = [p.data_ptr() for p in blocks.parameters()]
    model.to(torch.float32)  # what model.cuda() runs too: the weights stay where they are streamed from
    assert [p.data_ptr() for p in blocks.parameters()] == host
    with torch.no_grad():
        assert torch.equal(model(x), want)
    with pytest.raises(RuntimeError, match="keeps the streamed parameters' dtype"):
        model.half()
    streamed.remove()


def test_remove_gives_back_plain_modules_and_a_with_block_removes():
    torch = torch_or_skip()
    blocks = _blocks(torch)
    x = torch.randn(4, 32)
    want = _plain(torch, blocks, x)
    with sluice.StreamedLayers(blocks, _host_executor=HOST):
        with torch.no_grad():
            _run(blocks, x)
    assert all(not b._forward_pre_hooks and not b._forward_hooks for b in blocks)
    assert "_apply" not in vars(blocks[0])
    y = _run(blocks, x)  # grad enabled: plain modules again
    y.sum().backward()
    assert torch.equal(y.detach(), want)
    assert blocks[0][0].weight.grad is not None


# On the GPU.

@gpu
def test_on_the_gpu_forwards_equal_the_model_resident_bitwise():
    torch = torch_or_skip()
    blocks = _gpu_blocks(torch).cuda()
    x = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)
    want = _plain(torch, blocks, x)
    streamed = sluice.StreamedLayers(blocks, ahead=2)
    assert all(not p.is_cuda and p.is_pinned() for p in blocks.parameters())
    with torch.inference_mode():
        for _ in range(3):
            assert torch.equal(_run(blocks, x), want)
    streamed.remove()
    assert all(p.is_cuda for p in blocks.parameters())  # back where they came from
    assert torch.equal(_plain(torch, blocks, x), want)


@gpu
def test_on_the_gpu_device_memory_stays_within_the_budget():
    torch = torch_or_skip()
    blocks = _gpu_blocks(torch, count=12, width=2048)  # 64 MiB a block, built on the host
    block_bytes = sum(p.numel() * p.element_size() for p in blocks[0].parameters())
    x = torch.randn(8, 2048, device="cuda", dtype=torch.bfloat16)
    streamed = sluice.StreamedLayers(blocks, budget_bytes=3 * block_bytes + (1 << 20))
    assert streamed.ahead == 2 and streamed.device_bytes <= 3 * block_bytes + (1 << 20)
    torch.cuda.synchronize()

    def ring_pool():  # the ring's slots live in the device's default pool (cudaMallocAsync), apart from torch's
        return sluice._sluice._ring_pool_memory(streamed.device)

    before = ring_pool()["used"]
    sluice._sluice._ring_pool_memory(streamed.device, reset=True)
    with torch.inference_mode():
        for _ in range(2):
            _run(blocks, x)
    torch.cuda.synchronize()
    pool = ring_pool()
    # Each slot starts as a block of 1 byte (2 MiB in the pool) that goes once it grows to a block's bytes.
    assert pool["used_high"] - before <= streamed.device_bytes + 3 * (2 << 20), (pool, streamed.device_bytes)
    assert pool["used_high"] - before >= streamed.device_bytes - 3 * 256  # it measured the ring at all
    streamed.remove()


@gpu
def test_on_the_gpu_a_transformers_llama_with_its_decoder_layers_streamed():
    torch = torch_or_skip()
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=4, vocab_size=1000)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    ids = torch.randint(0, 1000, (2, 32), device="cuda")
    model.cuda()
    with torch.inference_mode():
        want = model(ids).logits
    streamed = sluice.StreamedLayers(model.model.layers)
    model.cuda()  # the rest stays put; the layers' weights stay on the host
    assert all(not p.is_cuda for p in model.model.layers.parameters())
    with torch.inference_mode():
        for _ in range(2):
            got = model(ids).logits
            assert torch.equal(got, want), float((got.float() - want.float()).abs().max())
        out = model.generate(ids, max_new_tokens=4, do_sample=False)  # the cache and many short forwards
    assert out.shape == (2, 36)
    streamed.remove()
