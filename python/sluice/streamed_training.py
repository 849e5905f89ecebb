"""Training through StreamedLayers: a forward that autograd records keeps no block's weights, the
backward streams them in again (last block first) and each weight's gradient, copied to the host,
goes to the host parameter through autograd (its hooks, .grad, torch.autograd.grad), where an
optimizer over the host parameters steps them (or, with grads="device", to a device tensor kept
across backwards until StreamedLayers.grads_to_host()).

Why not autograd as it is: a block's parameters are leaves whose .data the forward points at the
ring's memory. Autograd saves a leaf itself, so the backward would read whatever .data is then (the
host copy, on another device than the gradient), and the leaf's AccumulateGrad keeps the device and
dtype of the forward, so the gradient would land on the device. Instead the block's module is given,
for the forward, each weight as a non-leaf tensor out of Streamed (below), whose backward receives
the weight's gradient and gives the host parameter its copy on the host; and the tensors that the
block's operations save for the backward, where they are the weights' memory, are saved as tokens
(saved_tensors_hooks) that the backward turns back into the weights, streamed again through the ring.

The copies to the host run on sluice's ring to the host (_sluice._CopiesToHost, over
sluice::ring::ToHostRing): each gradient's copy waits on the GPU for the kernels queued before it
on torch's stream, and the ring's own thread waits on the host for each copy in turn, so that the
gradient's device memory is let go once its copy is done. On the host executor the same ring runs
over host memory and checks every edge as each copy starts (the schedule CI tests).

Why the copy needs a node of its own: the gradient goes back to the parameter as a page-locked host
tensor whose copy from the device is still queued (the backward's thread waiting for each copy
would leave the GPU idle at every weight). Between the parameter and each Streamed use of it lies
a WaitCopy node: a host tensor's node, which autograd runs on the thread that called backward(),
and which waits there for that gradient's copy while the device's thread goes on launching the
backward. Whatever reads the gradient after it - the sum of several uses, the parameter's hooks,
AccumulateGrad, torch.autograd.grad's result - reads it complete."""
from __future__ import annotations

import collections
import contextlib

import torch

from . import _sluice


class Streamed(torch.autograd.Function):
    """A block's weight on the device, as the block's module sees it in a recorded forward: the
    output's gradient goes to the host parameter's .grad, not to autograd's AccumulateGrad."""

    @staticmethod
    def forward(ctx, param, weight, training, k, i):
        ctx.training, ctx.k, ctx.i = training, k, i
        return weight

    @staticmethod
    def backward(ctx, grad):
        return ctx.training.send(ctx.k, ctx.i, grad), None, None, None, None


class WaitCopy(torch.autograd.Function):
    """The host parameter as a Streamed use of it sees it: its backward, on the host's autograd
    thread, waits for the copy of the gradient Streamed gave it before passing it on."""

    @staticmethod
    def forward(ctx, param, training):
        ctx.training = training
        return param.view_as(param)

    @staticmethod
    def backward(ctx, grad):
        copy = ctx.training.copied.pop(grad.data_ptr(), None)
        if copy is not None:
            copies, position, holder = copy
            copies.wait(position)  # the GIL released while it waits
            # The copy is done: the ring lets go of the host gradient, which autograd then holds
            # alone (AccumulateGrad takes a gradient held elsewhere as a copy, not page-locked).
            holder.clear()
        return grad, None


class Saved:
    """A saved tensor that lies in block k's weights: where it lies (bytes from the block's start),
    its dtype, shape and strides. Unpacked from the block's weights streamed in again."""

    __slots__ = ("k", "offset", "dtype", "shape", "stride", "bytes")

    def __init__(self, k, offset, t):
        self.k, self.offset, self.dtype, self.shape, self.stride = k, offset, t.dtype, t.shape, t.stride()
        # The bytes from its first element to its last, as its strides lay them out.
        self.bytes = t.element_size() * (1 + sum((n - 1) * s for n, s in zip(t.shape, self.stride))) if t.numel() else 0


class Training:
    """The training side of one StreamedLayers: the blocks' modules given their weights as Streamed
    tensors, the saved weights packed as tokens, the backward's blocks taken from the ring, and the
    gradients copied to the host (on a ring to the host, after the kernels that make them)."""

    def __init__(self, owner):
        self.owner = owner
        # Where each parameter of a block is registered: (module, name, index in the block's parameters).
        self.slots = []
        for block, params in zip(owner._blocks, owner._params):
            index = {id(p): i for i, p in enumerate(params)}
            self.slots.append([(m, name, index[id(p)]) for m in block.modules()
                               for name, p in m._parameters.items() if p is not None])
        self.device = owner._device
        # Copies in flight before the host waits for the oldest: a block's gradients. Each one's
        # device memory is held until its copy is drained, so that a block's gradients are made
        # while the block's before are copied out, and no more: two blocks' gradients at most.
        self.copy_ahead = max(1, min(_sluice.most_ahead, max((len(params) for params in owner._params), default=1)))
        self.copies = None  # this backward's ring to the host (made at its first gradient)
        # grads="host": a host gradient's address -> (its ring, its copy's position), waited for by WaitCopy.
        self.copied = {}
        self.sending = collections.deque()  # (position, device gradient, [host gradient]): held until drained
        self.pushed = None  # the saved-tensor hooks pushed by the block running now
        self.current = None  # (k, memory) of the block the backward reads now
        self.staged = []  # (parameter, device gradient) kept by this backward (grads="device"), in the order they came
        self.open = False  # a backward runs, its end queued to gather the gradients

    # The forward.

    def enter(self, k, memory, weights):
        self.pop()
        if self.open:  # the last backward ended in an exception
            self.drop()
        params = self.owner._params[k]
        seen = [self.streamed(p, w, k, i) if p.requires_grad else w for i, (p, w) in enumerate(zip(params, weights))]
        for m, name, i in self.slots[k]:
            m._parameters[name] = seen[i]
        base, end = memory.data_ptr(), memory.data_ptr() + memory.numel()

        def pack(t):
            # The block's weights and views of them go as tokens: the graph keeps none of their memory.
            if t.layout == torch.strided and base <= t.data_ptr() < end:
                return Saved(k, t.data_ptr() - base, t)
            return t

        self.pushed = torch.autograd.graph.saved_tensors_hooks(pack, self.unpack)
        self.pushed.__enter__()

    def streamed(self, p, weight, k, i):
        param = WaitCopy.apply(p, self) if self.owner._grads == "host" else p
        return Streamed.apply(param, weight, self, k, i)

    def leave(self, k):
        self.pop()
        for m, name, i in self.slots[k]:
            m._parameters[name] = self.owner._params[k][i]

    def pop(self):
        # Left by the block's post-hook, or (torch before 2.1, a block that raised) by the next block.
        if self.pushed is not None:
            pushed, self.pushed = self.pushed, None
            pushed.__exit__(None, None, None)

    # The backward.

    def drop(self):
        """A backward that ended in an exception: the gradients it kept on the device are dropped,
        and the device memory its copies read is let go once they are done. (Those that reached
        the host parameters stay, as plain autograd leaves them.)"""
        self.stop_copies()
        self.open, self.staged, self.current = False, [], None

    def stop_copies(self):
        """Nothing copies once it returns (the ring's copy stream drained): the memory its copies
        read and write may go."""
        if self.copies is not None:
            self.copies.stop()
        self.copies, self.copied = None, {}
        self.sending.clear()

    def begin(self):
        if not self.open:
            self.open = True
            torch.autograd.Variable._execution_engine.queue_callback(self.end)

    def unpack(self, saved):
        if type(saved) is not Saved:
            return saved
        if self.owner._blocks is None:
            raise RuntimeError("StreamedLayers was removed before the backward of a forward it ran")
        self.begin()
        if self.current is None or self.current[0] != saved.k:
            # The block before in the backward lets go of its weights: the ring reuses its slot.
            self.current = None
            self.release()
            try:
                memory, _ = self.owner._take(saved.k, backward=True, training=True)
            except BaseException:
                self.drop()
                raise
            self.current = (saved.k, memory)
        piece = self.current[1][saved.offset:saved.offset + saved.bytes]
        return piece.view(saved.dtype).as_strided(saved.shape, saved.stride)

    def send(self, k, i, grad):
        """Block k's parameter i's gradient for its host parameter: a page-locked host tensor, copied
        on the ring to the host once the kernels that make it are done (the GPU waits, the host only
        where `copy_ahead` copies are not done yet; WaitCopy waits for the copy before autograd reads
        it). With grads="device", none: it is kept on the device instead."""
        self.begin()
        if self.owner._grads == "device":  # kept on the device, added to the kept ones at the backward's end
            if self.device >= 0:  # the stream that made it, where end() adds it (the forward's)
                stream = torch.cuda.current_stream(self.device)
                kept = self.owner._kept_stream
                if kept is not None and kept != stream:
                    stream.wait_stream(kept)  # a backward on another stream than the last: the kept ones are written there
                self.owner._kept_stream = stream
            # A copy of its own, to keep and add to in place: autograd's tensor may be held elsewhere too
            # (the gradient given to backward(), a hook's, another parameter's), which later adds
            # and the caller's in-place work (all_reduce, scaling) must leave alone.
            self.staged.append((self.owner._params[k][i], grad.clone(memory_format=torch.contiguous_format)))
            return None
        if self.copies is None:
            self.copies = _sluice._CopiesToHost(self.device, self.copy_ahead)
        source = grad.contiguous()
        host = _copy_to_host(self.copies, self.device, source, self.sending)
        if torch.is_anomaly_enabled():
            self.copies.wait(self.sending[-1][0])  # anomaly mode checks the gradient for NaN on this thread, now
            self.sending[-1][2].clear()
        else:
            self.copied[host.data_ptr()] = (self.copies, self.sending[-1][0], self.sending[-1][2])
        return host

    def release(self):
        """At a block's first use in the backward: the gradients whose copies are done are let go,
        so that the memory they free, which the next blocks' gradients are made in, is written
        only after it is read."""
        if self.copies is None:
            return
        drained = self.copies.drained
        while self.sending and self.sending[0][0] < drained:
            self.sending.popleft()

    def end(self):
        """The end of a backward. Its host gradients reached their parameters through autograd
        (hooks, then .grad or torch.autograd.grad's result). Kept on the device, they go to the kept
        gradients as AccumulateGrad would put them, the first set, the next ones added, only now: a
        backward that raised before its end left them as they were."""
        staged, self.staged, self.open, self.current = self.staged, [], False, None
        if self.owner._grads == "device":
            # end() may run on an autograd thread whose current stream is not the one that made them.
            kept, stream = self.owner._kept, self.owner._kept_stream
            with torch.no_grad(), (torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()):
                for p, g in staged:
                    if id(p) in kept:
                        kept[id(p)].add_(g)
                    else:
                        kept[id(p)] = g
            return
        # The host gradients went to the parameters through autograd, each after its copy: the
        # device memory the copies read is let go now.
        copies, self.copies = self.copies, None
        try:
            if copies is not None:
                copies.finish()
        finally:
            self.sending.clear()
            self.copied = {}


# Gradients kept on the device (grads="device"), across backwards until grads_to_host().

def device_grads(owner):
    """StreamedLayers.device_grads(): the kept gradients, ready on the caller's stream."""
    if owner._device >= 0:  # the caller's stream uses them after the kernels that made them (as autograd's leaves)
        torch.cuda.current_stream(owner._device).wait_stream(owner._kept_stream)
    return [(p, owner._kept[id(p)]) for params in owner._params for p in params if id(p) in owner._kept]


def grads_to_host(owner):
    """StreamedLayers.grads_to_host(): the kept gradients copied into .grad, then freed."""
    kept = device_grads(owner)
    # After the kernels that made or changed them (torch's stream, which device_grads() made wait
    # for the backward's), on a ring to the host; done before the device memory they read is freed.
    training = owner._training
    copies, held = _sluice._CopiesToHost(owner._device, training.copy_ahead), collections.deque()
    try:
        host = [_copy_to_host(copies, owner._device, g, held) for _, g in kept]
        copies.finish()
    finally:
        copies.stop()
    owner._kept = {}
    with torch.no_grad():
        for (p, _), h in zip(kept, host):
            if p.grad is None:
                p.grad = h
            else:
                p.grad.add_(h)


def _copy_to_host(copies, device, source, held):
    """source's bytes (contiguous, on `device`) into a new host tensor, on the ring `copies`, after
    the work queued so far on torch's stream; (position, source, host) appended to `held`, which
    keeps both memories until the copy is drained (or, the host's, until WaitCopy has waited for it). The host tensor."""
    if device >= 0:
        host = torch.empty(source.shape, dtype=source.dtype, pin_memory=True)
        stream = torch.cuda.current_stream(device).cuda_stream
    else:  # the host executor: host memory as the device's
        host = torch.empty(source.shape, dtype=source.dtype)
        stream = 0
    position = copies.put(stream, source.data_ptr(), source.numel() * source.element_size(), host.data_ptr())
    # The host tensor in a list of its own, which WaitCopy empties once the copy is done: until
    # then a backward that raises lets go of the gradient while its copy may still write it.
    held.append((position, source, [host]))
    return host
