"""A model's blocks run with their weights streamed onto the GPU just ahead of use: StreamedLayers
keeps each block's parameters in page-locked host memory and copies them through a ring of device
slots (the prefetcher's, sluice::ring::BatchPrefetcher) on a copy stream, one block's weights while
the block before computes."""
from __future__ import annotations

import inspect
import warnings
import weakref

from . import _options, _sluice
from ._arrays import torch_or_none
from ._devices import cuda_index

# The ring's positions the forward holds: the block running now. Taking the next block's weights
# releases the last block's slot (on torch's stream, after its kernels): a slot fewer than a
# Prefetcher, whose loop may still hold the batch before.
_HELD = 1
_MOST_AHEAD = _options.MOST_AHEAD


def _block_bytes(tensors):
    """A block's bytes on the device, laid out as the ring lays them (each tensor at an aligned offset)."""
    return _sluice._batch_bytes([t.numel() * t.element_size() for t in tensors])


class StreamedLayers:
    """Blocks of a model whose weights do not fit the GPU, run with their weights streamed in.

        model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.bfloat16)  # on the host
        streamed = sluice.StreamedLayers(model.model.layers, budget_bytes=4 << 30, device="cuda")
        model.cuda()                          # the rest of the model; the layers' weights stay on the host
        with torch.inference_mode():
            logits = model(input_ids.cuda()).logits

    `blocks` is a sequence of modules (an nn.ModuleList) that the model calls in that order in
    each forward (and trains, below). Their parameters move to page-locked host memory (from
    wherever they were) and stay there: between forwards `param` is that host tensor, so state_dict() and inspection work.
    Entering block k points its parameters at its weights on the device, copied there on a copy
    stream while block k-1 computed (torch's current stream waits for the copy on the GPU, never the
    host); leaving it points them back. The ring runs on from forward to forward: the next forward's
    first blocks are copied while the end of this one runs. Buffers are not streamed: they stay
    resident and move with the model (model.cuda() moves them; it leaves the parameters streamed,
    and a dtype conversion of them is refused: convert before streaming).

    Device memory: `ahead` + 1 slots, each of the largest block's bytes (`device_bytes`): the
    block running and the `ahead` blocks copied ahead of it. `budget_bytes` picks the largest
    `ahead` (up to the number of blocks) that fits; a budget below two slots is refused before any
    work. Default without a budget: ahead 1, two slots. A tensor of a block's weights that is kept
    past the block (rare) keeps its memory, and the ring takes new memory for that slot.

    Training: a forward that autograd records (grad enabled, a streamed parameter or the block's
    input requiring grad) keeps no block's weights on the device: the weights its operations save
    for the backward are kept as tokens, and the backward streams each block's weights in again,
    last block first, the next block's copied while one computes. Each weight's gradient is copied
    to a page-locked host tensor on sluice's ring to the host (a copy stream, after the kernels
    that make it; the host waits only where a block's copies are not done yet as the next block's
    gradients come) and, when backward() returns, is in the host
    parameter's .grad (set, or added to as autograd accumulates): step them with an optimizer over
    the host parameters, on the CPU; the next forward streams the stepped weights.

        host = list(layers.parameters())                     # page-locked, on the host
        opt = torch.optim.AdamW(host, lr=1e-4)               # and one for the resident rest of the model
        loss = model(ids.cuda(), labels=labels.cuda()).loss
        loss.backward()                                      # p.grad: page-locked host tensors, complete
        opt.step(); opt.zero_grad(set_to_none=True)

    Gradients kept on the device (`grads="device"`): a backward leaves .grad as it is and keeps
    each streamed parameter's gradient in a device tensor of its own, set by the first backward and
    added to by the next ones, as autograd accumulates: accumulation over micro-batches copies them
    out once a step, not once a backward, and they can be reduced across ranks on the device first.
    device_grads() lists them, (host parameter, device gradient), to change in place (all_reduce,
    scaling); grads_to_host() copies them into the host parameters' .grad (set, or added to) and
    frees them. With `grads="host"` (the default) grads_to_host() does nothing. Only parameters
    that got a gradient are listed: ranks that reduce them must each use the same parameters. Each
    backward's gradients are copied once on the device before they are kept (autograd's tensor may
    be held elsewhere too, as the gradient given to backward() is).

        streamed = sluice.StreamedLayers(layers, budget_bytes=4 << 30, device="cuda", grads="device")
        for ids, labels in micro_batches:                    # the gradients add up on the GPU
            model(ids, labels=labels).loss.backward()
        for p, g in streamed.device_grads():
            dist.all_reduce(g); g /= dist.get_world_size()   # the mean, on the device, as DDP takes it
        streamed.grads_to_host(); opt.step(); opt.zero_grad(set_to_none=True)

    The device memory this adds, beyond the slots (`budget_bytes` covers the slots alone): every
    streamed parameter's gradient that requires grad, their bytes, from the first backward to
    grads_to_host(). A backward adds its gradients to the kept ones at its end, so that one that
    raises leaves them as they were: while a backward after the first runs, its own gradients are
    held beside the kept ones (up to twice those bytes).

    Device memory in training with `grads="host"`: the slots, and the gradients of a block or two
    (the block's being made while the one before is copied out). Parameters that do not require
    grad get none. With `grads="host"` each gradient reaches its host parameter through autograd,
    as a resident parameter's does: the parameter's hooks (register_hook, and
    register_post_accumulate_grad_hook where torch has it) run on it, .grad is set or added to,
    torch.autograd.grad(loss, params) returns the gradients and leaves .grad alone, and
    backward(inputs=...) fills only those given; a backward that raises leaves what reached .grad
    as plain autograd leaves it. (A parameter's hook gets its gradient once its copy to the host
    is done: a node between the parameter and each use of it waits for that copy.) With
    `grads="device"` the gradients bypass the parameters until grads_to_host(): their hooks do not
    run, and torch.autograd.grad over them finds them unused. During a recorded forward a block's module sees its
    weights as plain tensors, not its Parameters, which it sees again after. Not supported inside
    the blocks: activation checkpointing (its recomputation runs outside the streamed forward).

    Blocks called out of order (a block skipped or called again, a forward abandoned by an
    exception, a recorded forward whose backward never comes) are served correctly: the ring starts
    afresh from the block called, at the cost of its fill. One thread drives the forward. In
    inference, weights changed in place while streamed may be copied stale for the blocks already
    ahead; in training, no block of the next forward is copied before it starts (the optimizer
    steps the weights in between).

    remove() (or leaving `with StreamedLayers(...)`) stops the ring, removes the hooks and puts
    every parameter back on the device it came from (a GPU's, or the host's, there left
    page-locked). Gradients kept on the device and not taken with grads_to_host() are dropped.
    """

    def __init__(self, blocks, *, budget_bytes=None, ahead=None, device=None, grads="host", _host_executor=None):
        if grads not in ("host", "device"):
            raise ValueError(f"grads={grads!r}: give \"host\" (each backward's gradients to the host .grad) or "
                             f"\"device\" (kept on the device until grads_to_host())")
        torch = self._torch = torch_or_none()
        if torch is None:
            raise RuntimeError("StreamedLayers streams torch modules and torch is not installed")
        self._grads = grads
        self._kept = {}  # grads="device": id(host parameter) -> its gradient on the device, kept across backwards
        self._kept_stream = None  # ... made on this stream (the backward's, torch's current stream of the forward)
        self._blocks = list(blocks)
        if not self._blocks:
            raise ValueError("StreamedLayers needs at least one block")
        for k, block in enumerate(self._blocks):
            if not isinstance(block, torch.nn.Module):
                raise TypeError(f"block {k} is a {type(block).__name__}, not a torch.nn.Module")
        if len({id(b) for b in self._blocks}) != len(self._blocks):
            raise ValueError("a block appears twice in `blocks`: each block is streamed once per forward")
        self._params = [list(dict.fromkeys(b.parameters())) for b in self._blocks]
        seen = {}
        for k, params in enumerate(self._params):
            for p in params:
                if id(p) in seen:
                    raise ValueError(f"blocks {seen[id(p)]} and {k} share a parameter: streamed blocks cannot share weights")
                seen[id(p)] = k
        self._host_executor = _host_executor  # {"jitter_us":, "seed":, "fail_stage_at":}: the host ring executor, for tests
        if _host_executor is not None:
            self._device = -1
        else:
            self._device = cuda_index(torch, device)
        self._slot_bytes = max(_block_bytes(params) for params in self._params)
        self._ahead = self._choose_ahead(budget_bytes, ahead)

        # Everything is checked: now the weights move. Each parameter's host copy is made contiguous
        # and page-locked (on the host executor, where there is no GPU to lock for, left pageable).
        self._origin = [[p.device for p in params] for params in self._params]
        self._host = []
        for params in self._params:
            host = []
            for p in params:
                h = p.detach().to("cpu").contiguous()
                if self._device >= 0:
                    h = h.pin_memory()
                p.data = h
                host.append(h)
            self._host.append(host)
        self._pieces = [[(h.data_ptr(), h.numel() * h.element_size(), True, -1, 0) for h in host] for host in self._host]
        self._ring_box = _Holder()
        self._loaded = None  # the block whose parameters point at device memory now
        self._loaded_training = False  # ... through the training path (its module's parameters swapped)
        self._training = None  # streamed_training.Training, made by the first forward that autograd records
        self._warned = False
        self._hooks = []
        # Where torch has it (2.1+), the post-hook runs even when the block raises: a training forward
        # must give back the saved-tensor hooks it pushed. Before, the next block entered does.
        always = {"always_call": True} if "always_call" in inspect.signature(
            torch.nn.Module.register_forward_hook).parameters else {}
        for k, block in enumerate(self._blocks):
            self._hooks.append(block.register_forward_pre_hook(self._make_pre_hook(k)))
            self._hooks.append(block.register_forward_hook(self._make_post_hook(k), **always))
            block._apply = self._make_apply(block, self._params[k])  # model.cuda() leaves the weights streamed
        # A ring still running at exit is stopped while the interpreter can still do it.
        self._finalizer = weakref.finalize(self, self._ring_box.stop)

    def _choose_ahead(self, budget, ahead):
        least = (1 + _HELD) * self._slot_bytes
        if ahead is not None and not 1 <= ahead <= _MOST_AHEAD:
            raise ValueError(f"ahead must be 1 to {_MOST_AHEAD} blocks")
        if budget is None:
            return _options.STREAMED_WEIGHTS.default("ahead") if ahead is None else ahead
        if budget < least:
            raise ValueError(f"budget_bytes={budget} cannot hold the {1 + _HELD} device slots StreamedLayers needs at "
                             f"least (the block running and one ahead), each of the largest block's "
                             f"{self._slot_bytes} bytes: give at least {least}")
        fits = budget // self._slot_bytes - _HELD
        if ahead is None:
            return min(fits, len(self._blocks), _MOST_AHEAD)
        if ahead > fits:
            raise ValueError(f"ahead={ahead} needs {(ahead + _HELD) * self._slot_bytes} bytes of device slots "
                             f"({ahead + _HELD} of {self._slot_bytes}) and budget_bytes={budget} holds {fits + _HELD}")
        return ahead

    @property
    def ahead(self):
        return self._ahead

    @property
    def device(self):
        return self._device

    @property
    def device_bytes(self):
        """Device memory the ring's slots take: (ahead + 1) x the largest block's bytes."""
        return (self._ahead + _HELD) * self._slot_bytes

    def __len__(self):
        return len(self._blocks)

    # Gradients kept on the device (grads="device").

    def device_grads(self):
        """[(host parameter, its gradient on the device)] kept by the backwards since the last
        grads_to_host(), in block order and each block's parameter order; a parameter that got no
        gradient (frozen) has no entry. The tensors are the kept ones: change them in place."""
        if not self._kept:
            return []
        from .streamed_training import device_grads
        return device_grads(self)

    def grads_to_host(self):
        """Copies each kept device gradient into its host parameter's .grad (set where it is None,
        else added to), waits for the copies and frees the device gradients."""
        if self._kept:
            from .streamed_training import grads_to_host
            grads_to_host(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False

    # The forward, block by block.

    def _make_pre_hook(self, k):
        def pre_hook(module, args):
            self._enter(k, args)
        return pre_hook

    def _make_post_hook(self, k):
        def post_hook(module, args, output):
            if self._loaded == k:
                self._unload()
        return post_hook

    def _enter(self, k, args):
        torch = self._torch
        if self._blocks is None:
            raise RuntimeError("StreamedLayers was removed")
        if self._loaded is not None:  # a block left by an exception: its weights go back first
            self._unload()
        # A forward that autograd records (a parameter or an input asks for grad) keeps its weights
        # out of the graph and streams them again for the backward (streamed_training.py).
        if torch.is_grad_enabled() and (any(p.requires_grad for params in self._params for p in params)
                                        or any(getattr(a, "requires_grad", False) for a in args)):
            if self._training is None:
                from .streamed_training import Training
                self._training = Training(self)
            memory, weights = self._take(k, backward=False, training=True)
            self._training.enter(k, memory, weights)
            self._loaded, self._loaded_training = k, True
            return
        _, weights = self._take(k, backward=False, training=False)
        for p, w in zip(self._params[k], weights):
            p.data = w
        self._loaded, self._loaded_training = k, False

    def _take(self, k, *, backward, training):
        """Block k's weights on the device, from the ring if it has them next, else from a ring
        started afresh at k. The training ring's order is the forward's blocks, then the backward's."""
        ring = self._ring_box.ring
        step = (backward, k)
        if ring is None or ring.training != training or ring.step(ring.taken)[1:] != step:
            # A forward starts at block 0 and a backward at the last block: no order broken there.
            if ring is not None and k != (len(self._blocks) - 1 if backward else 0) and not self._warned:
                self._warned = True
                warnings.warn(f"StreamedLayers: block {k} was called where block {ring.step(ring.taken)[2]} was "
                              f"next{' in the backward' if backward else ''}: the weights are streamed afresh from "
                              f"block {k} (a fill, each time the order breaks)", RuntimeWarning, stacklevel=5)
            self._ring_box.stop()
            ring = self._ring_box.ring = _Ring(self, step, training)
        try:
            return ring.take()
        except BaseException:
            self._ring_box.stop()
            raise

    def _unload(self):
        k, self._loaded = self._loaded, None
        if self._loaded_training:
            self._training.leave(k)
            return
        for p, h in zip(self._params[k], self._host[k]):
            p.data = h

    # Conversions of the model (model.cuda(), .to()).

    def _make_apply(self, block, params):
        torch = self._torch
        streamed = {id(p) for p in params}

        def apply(fn, *args, **kwargs):
            # Buffers move as the model's do; parameters stay streamed, in their dtype.
            for p in params:
                if fn(torch.empty(0, dtype=p.dtype)).dtype != p.dtype:
                    raise RuntimeError("StreamedLayers keeps the streamed parameters' dtype: convert the model "
                                       "before streaming it, or remove() first")
            for module in block.modules():
                for name, buf in module._buffers.items():
                    if buf is not None:
                        module._buffers[name] = fn(buf)
                for name, p in module._parameters.items():
                    if p is not None and id(p) not in streamed:
                        p.data = fn(p.data)
            return block
        return apply

    def remove(self):
        """Stops the ring, removes the hooks and puts each parameter back on the device it came from.
        Gradients kept on the device (grads="device") and not taken with grads_to_host() are dropped."""
        if self._blocks is None:
            return
        self._ring_box.stop()
        if self._loaded is not None:
            self._unload()
        for h in self._hooks:
            h.remove()
        if self._training is not None:
            self._training.drop()  # a backward that raised leaves its gradients staged: they go too
        for block, params, host, origin in zip(self._blocks, self._params, self._host, self._origin):
            del block._apply
            for p, h, where in zip(params, host, origin):
                p.data = h if where.type == "cpu" else h.to(where)
                if p.grad is not None and where.type != "cpu":  # the gradient goes with its parameter
                    p.grad = p.grad.to(where)
        self._blocks = self._params = self._host = self._pieces = None
        self._kept = {}  # gradients kept on the device and not taken with grads_to_host() are dropped
        self._finalizer.detach()


class _Holder:
    """The live ring, where the exit-time finalizer can reach it without holding StreamedLayers."""

    def __init__(self):
        self.ring = None

    def stop(self):
        ring, self.ring = self.ring, None
        if ring is not None:
            ring.stop()


class _Ring:
    """The prefetcher's ring over the blocks' weights in the order they run, from step `first` on.
    Inference: the forward's blocks round and round. Training: each step's forward (0 .. n-1) then its
    backward (n-1 .. 0), and no further until the next forward starts: the optimizer steps the host
    weights in between, and a copy made before it would be stale. Put and taken on the thread that
    runs the blocks (the forward's, then autograd's), never two at once; no Python thread of its own."""

    def __init__(self, owner, first, training):
        # Not the owner itself: the owner's exit-time finalizer reaches this ring, and a ring that
        # held its owner would keep it (its page-locked weights, the device slots) alive for good.
        self.owner = weakref.proxy(owner)
        self.torch = owner._torch
        self.n = len(owner._blocks)
        self.training = training
        backward, k = first
        self.first = _sluice._position_in_pass(k, backward, self.n)
        self._per_pass = _sluice._layer_positions(self.n, training)
        host = owner._host_executor
        self.core = _sluice._Prefetcher(owner._device, owner._ahead, _HELD, 0,
                                        **({"jitter_us": host.get("jitter_us", 0), "seed": host.get("seed", 1),
                                            "fail_stage_at": host.get("fail_stage_at")} if host is not None else {}))
        self.put = 0
        self.taken = 0
        self.last_put = None  # training: the last position of the step being taken
        self.last = None  # (position, weak reference to its memory) of the block taken last

    def step(self, position):
        """(pass, backward, block) at a position, in the one order of a step's blocks (ring/layer_steps.hpp)."""
        return _sluice._layer_step(self.first + position, self.n, self.training)

    def fill(self, through):
        # Position p may be put once p - ahead is taken: put() never waits for a take this thread must make.
        if self.last_put is not None:
            through = min(through, self.last_put)
        while self.put <= through:
            k = self.step(self.put)[2]
            self.core.put(self.owner._pieces[k], self.owner._host[k])
            self.put += 1

    def take(self):
        """(memory, weights): the next block's memory (bytes) and its weights, ready on torch's current stream."""
        torch, owner = self.torch, self.owner
        ahead = owner._ahead
        if self.training:
            # The step's last position: its pass ends there.
            self.last_put = self.taken + self._per_pass - 1 - (self.first + self.taken) % self._per_pass
        self.fill(self.taken + ahead - 1)
        if self.last is not None:
            position, memory = self.last
            if memory() is not None:  # a tensor of the last block's weights outlived it: it keeps its block
                self.core.keep(position)
        stream = torch.cuda.current_stream(owner._device).cuda_stream if owner._device >= 0 else 0
        got = self.core.take(stream)
        if got is None:
            raise AssertionError("the weights' ring ended")  # never closed while it runs
        position, capsule, offsets, memory = got
        k = self.step(self.taken)[2]
        self.taken += 1
        self.last = (position, weakref.ref(memory))
        self.fill(self.taken - 1 + ahead)  # copied while this block computes
        block = torch.utils.dlpack.from_dlpack(capsule)
        del memory  # only the weights' tensors hold it now
        return block, [block[o:o + h.numel() * h.element_size()].view(h.dtype).view(h.shape)
                       for o, h in zip(offsets, owner._host[k])]

    def stop(self):
        if self.core is not None:
            self.core.stop()  # the copies in flight finish; nothing runs after
            self.core = None
