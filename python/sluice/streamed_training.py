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

Why the copy needs a node of its own: the gradient goes back to the parameter as a page-locked host
tensor whose copy from the device is still queued (the backward's thread waiting for each copy
would leave the GPU idle at every weight). Between the parameter and each Streamed use of it lies
a WaitCopy node: a host tensor's node, which autograd runs on the thread that called backward(),
and which waits there for that gradient's copy while the device's thread goes on launching the
backward. Whatever reads the gradient after it - the sum of several uses, the parameter's hooks,
AccumulateGrad, torch.autograd.grad's result - reads it complete."""
from __future__ import annotations

import contextlib

import torch


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
        event = ctx.training.copied.pop(grad.data_ptr(), None)
        if event is not None:
            event.synchronize()
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
    gradients copied to the host (on a copy stream of their own, after the kernels that make them)."""

    def __init__(self, owner):
        self.owner = owner
        # Where each parameter of a block is registered: (module, name, index in the block's parameters).
        self.slots = []
        for block, params in zip(owner._blocks, owner._params):
            index = {id(p): i for i, p in enumerate(params)}
            self.slots.append([(m, name, index[id(p)]) for m in block.modules()
                               for name, p in m._parameters.items() if p is not None])
        self.device = owner._device
        self.d2h = torch.cuda.Stream(self.device) if self.device >= 0 else None
        # grads="host": a host gradient's address -> the event after its copy, waited for by WaitCopy.
        self.copied = {}
        self.pushed = None  # the saved-tensor hooks pushed by the block running now
        self.current = None  # (k, memory) of the block the backward reads now
        self.staged = []  # (parameter, host gradient) copied by this backward, in the order they came
        self.sending = []  # the device gradients of the block whose copies are being queued
        self.copying = []  # (event, gradients) of the blocks before, their copies queued before the event
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
        param = WaitCopy.apply(p, self) if self.owner._grads == "host" and self.d2h is not None else p
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
        if self.d2h is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.d2h)
        self.open, self.staged, self.sending, self.copying, self.current = False, [], [], [], None
        self.copied = {}

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
        on the copy stream once the kernels that make it are done (the stream waits, never the host;
        WaitCopy waits for the copy before autograd reads it). With grads="device",
        none: it is kept on the device instead."""
        self.begin()
        if self.owner._grads == "device":  # kept on the device, added to the kept ones at the backward's end
            if self.d2h is not None:  # the stream that made it, where end() adds it (the forward's)
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
        if self.d2h is None:  # the host executor: the gradient is already on the host
            return grad.clone(memory_format=torch.contiguous_format)
        self.d2h.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.d2h):
            host = torch.empty(grad.shape, dtype=grad.dtype, pin_memory=True)
            host.copy_(grad, non_blocking=True)
        self.sending.append(grad)  # held until torch's stream has waited for its copy (release())
        event = self.d2h.record_event()
        if torch.is_anomaly_enabled():
            event.synchronize()  # anomaly mode checks the gradient for NaN on this thread, now
        else:
            self.copied[host.data_ptr()] = event
        return host

    def release(self):
        """At a block's first use in the backward, the gradients sent since the last are one block's.
        Those of the block before them are let go: torch's stream waits for their copies first (the
        device waits, not the host), so that the memory they free, which the next block's gradients
        are made in, is written only after it is read. One block's gradients are in flight, not every
        block's (record_stream would free them only once the host saw the copies done)."""
        if self.d2h is None:
            self.sending = []
            return
        if self.sending:
            self.copying.append((self.d2h.record_event(), self.sending))
            self.sending = []
        while len(self.copying) > 1:
            event, _ = self.copying.pop(0)
            torch.cuda.current_stream(self.device).wait_event(event)

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
        if self.d2h is not None:
            self.d2h.synchronize()
        self.sending, self.copying, self.copied = [], [], {}


# Gradients kept on the device (grads="device"), across backwards until grads_to_host().

def device_grads(owner):
    """StreamedLayers.device_grads(): the kept gradients, ready on the caller's stream."""
    if owner._device >= 0:  # the caller's stream uses them after the kernels that made them (as autograd's leaves)
        torch.cuda.current_stream(owner._device).wait_stream(owner._kept_stream)
    return [(p, owner._kept[id(p)]) for params in owner._params for p in params if id(p) in owner._kept]


def grads_to_host(owner):
    """StreamedLayers.grads_to_host(): the kept gradients copied into .grad, then freed."""
    kept = device_grads(owner)
    if owner._device >= 0:
        # After the kernels that made or changed them (torch's stream, which device_grads() made
        # wait for the backward's), on the training's copy stream.
        d2h = owner._training.d2h
        d2h.wait_stream(torch.cuda.current_stream(owner._device))
        with torch.cuda.stream(d2h):
            host = [torch.empty(g.shape, dtype=g.dtype, pin_memory=True).copy_(g, non_blocking=True)
                    for _, g in kept]
        d2h.synchronize()  # the copies are done before the device memory they read is freed
    else:  # the host executor: the kept gradients are on the host already, copied all the same
        host = [g.clone() for _, g in kept]
    owner._kept = {}
    with torch.no_grad():
        for (p, _), h in zip(kept, host):
            if p.grad is None:
                p.grad = h
            else:
                p.grad.add_(h)
