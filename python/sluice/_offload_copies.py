"""The copies OffloadActivations makes and the streams and events that order them: CudaCopies on a
GPU, HostCopies on the host for tests (CPU tensors as the device's, plain copies, events that a
test can hold back), one interface so that the host tests run the same bookkeeping."""
from __future__ import annotations


class CudaCopies:
    """Copies on two copy streams of `device` (D2H and H2D: each direction has its own copy engine,
    and a copy back for the backward must not queue behind the forward's copies out), each after
    the work enqueued so far on torch's current stream."""

    def __init__(self, torch, device):
        self.torch, self.device = torch, device
        self.streams = {"d2h": torch.cuda.Stream(device), "h2d": torch.cuda.Stream(device)}

    def is_device(self, tensor):
        return tensor.is_cuda and tensor.device.index == self.device

    def current(self):
        return self.torch.cuda.current_stream(self.device)

    def host_bytes(self, nbytes):
        return self.torch.empty(nbytes, dtype=self.torch.uint8, pin_memory=True)

    def device_bytes(self, nbytes):
        """Device memory taken on the current stream (the stream that reads it)."""
        return self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.torch.device("cuda", self.device))

    def copy(self, dst, src, label, after=None):
        """dst <- src on the copy stream of label[0], after the current stream's work so far (which
        made src, or last used dst's memory before the allocator handed it out) and the event
        `after` (the copy that filled src); the event of the copy's end."""
        torch = self.torch
        side = self.streams[label[0]]
        ready = torch.cuda.Event()
        ready.record(self.current())
        side.wait_event(ready)
        if after is not None:
            side.wait_event(after)
        with torch.cuda.stream(side):
            dst.copy_(src, non_blocking=True)  # pinned on the host side: a DMA, no host wait
        done = torch.cuda.Event()
        done.record(side)
        return done

    def wait(self, stream, event):
        stream.wait_event(event)

    def mark(self, stream):
        """An event where `stream` has got to."""
        event = self.torch.cuda.Event()
        event.record(stream)
        return event

    def done(self, event):
        return event.query()

    def host_wait(self, event):
        event.synchronize()  # the GIL released while it waits

    def also_used_on(self, tensor, stream):
        tensor.record_stream(stream)


class HostEvent:
    """Done once queried `lag` times: a test's stand-in for a copy still running on its stream."""

    def __init__(self, lag):
        self.lag = lag

    def query(self):
        if self.lag > 0:
            self.lag -= 1
            return False
        return True


class HostCopies:
    """CPU tensors as the device's; each copy runs at once (its values are there), its event may lag.
    `buffer_bytes`: the pool's smallest buffer. `log` lists the copies in the order issued: ("d2h" | "h2d", index of the saved tensor)."""

    device = "cpu"

    def __init__(self, torch, lag=0, buffer_bytes=1 << 20):
        self.torch, self.lag, self.buffer_bytes = torch, lag, buffer_bytes
        self.log = []
        self.host_allocations = 0
        self.host_waits = 0

    def is_device(self, tensor):
        return tensor.device.type == "cpu"

    def current(self):
        return None

    def host_bytes(self, nbytes):
        self.host_allocations += 1
        return self.torch.empty(nbytes, dtype=self.torch.uint8)

    def device_bytes(self, nbytes):
        return self.torch.empty(nbytes, dtype=self.torch.uint8)

    def copy(self, dst, src, label, after=None):
        dst.copy_(src)
        self.log.append(label)
        return HostEvent(self.lag)

    def wait(self, stream, event):
        pass

    def mark(self, stream):
        return HostEvent(0)

    def done(self, event):
        return event.query()

    def host_wait(self, event):
        self.host_waits += 1
        event.lag = 0

    def also_used_on(self, tensor, stream):
        pass
