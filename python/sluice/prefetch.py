"""Any batch onto the GPU ahead of the step: Prefetcher wraps an iterable of batches (see
sluice::ring::BatchPrefetcher)."""
from __future__ import annotations

import collections
import collections.abc
import inspect
import operator
import sys
import threading
import time
import warnings
import weakref

from . import _options, _sluice
from ._arrays import torch_or_none
from ._devices import cuda_index
from ._batch_tree import flatten, rebuild

# How long stopping waits for the inner iterable to hand over the batch it is making.
_JOIN_SECONDS = 30.0
# Batches the loop holds: the last one, and the one before while `for` rebinds its variable.
_HELD = 2


class Prefetcher:
    """Batches of any iterable on the GPU `ahead` batches before the loop asks for them.

        loader = DataLoader(dataset, batch_size=64, num_workers=8)        # no pin_memory needed
        for images, labels in sluice.Prefetcher(loader):                  # CUDA tensors, ready on the current stream
            loss = model(images).cross_entropy(labels) ...

    A batch is a tensor, a NumPy array, or any nesting of tuples, named tuples, lists, dicts and
    dataclasses of them; it comes out with the same structure, every array a CUDA tensor of the
    same dtype and shape (NumPy arrays become tensors). Other leaves (numbers, strings, CUDA
    tensors) pass through as they are.

    A thread of the prefetcher's walks the iterable; with thread=False the loop's own thread does,
    `ahead` batches before it needs them (no second Python thread to share the GIL with: better
    where taking a batch from the iterable costs the loop little, as with a DataLoader's workers
    or tensors already in memory). Each batch's pageable arrays are copied by
    staging threads, in parallel, into page-locked slots that are reused from batch to batch
    (they grow to the largest batch); arrays that a DataLoader's workers send through shared
    memory are read from their files (pread), their pages never touched here; page-locked
    arrays (pin_memory=True, or a DataLoader's with collate_fn=sluice.PinnedCollate()) are copied
    where they lie. The copies run on a copy stream; torch's current stream waits for each batch
    on the GPU, never the host. All of a batch's arrays lie in one block of device memory that is
    reused once the loop has moved two batches on and torch's stream is past it; a batch (or a
    tensor of it) kept longer keeps its block, and the prefetcher takes new memory for later batches.

    The iterable is asked for its next batch only once the batch before is read where it lies
    (staged into page-locked memory, or, page-locked, copied to the device): an iterable that
    refills one buffer and yields it again each time gives every batch its own values.

    An exception in the iterable is raised by the loop at that batch, as itself. Leaving the loop
    early, an exception in it, or Ctrl-C stops the prefetcher's thread and copies; nothing stays
    running or page-locked. Each `for` is one pass over the iterable (one epoch of a DataLoader).
    Over an iterator (a generator, iter(loader): an object that is its own iterator), a `for` left
    early keeps the batches it had fetched ahead, on the device, and the next `for` yields them
    first, then goes on with the iterator, as a plain `for` over it would.

    state_dict() is the inner iterable's state_dict() as of the last batch the loop received,
    not the batches held ahead; load_state_dict() hands it back to the iterable (a torchdata
    StatefulDataLoader, or any iterable with both methods).
    """

    def __init__(self, batches, *, thread=True, _host_executor=None, **options):
        options = _options.PREFETCHER.filled(options)
        ahead, threads, device = options["ahead"], options["threads"], options["device"]
        try:
            ahead = operator.index(ahead)  # any integer (a NumPy one too), nothing else
        except TypeError:
            raise TypeError(f"ahead takes a whole number of batches, not {ahead!r}") from None
        if not 1 <= ahead <= _options.MOST_AHEAD:
            raise ValueError(f"ahead must be 1 to {_options.MOST_AHEAD} batches, not {ahead}")
        self._batches = batches
        self._ahead, self._threads, self._thread = ahead, threads, bool(thread)
        self._host_executor = _host_executor  # {"jitter_us":, "seed":, "fail_stage_at":}: the host ring executor, for tests
        self._torch = torch_or_none()
        if self._torch is None:
            raise RuntimeError("Prefetcher yields torch tensors and torch is not installed")
        if _host_executor is not None:
            self._device = -1
        else:
            self._device = cuda_index(self._torch, device)
        self._state = None
        self._pass = None
        # Over an iterator, a `for` left early hands the batches it fetched ahead to the next one.
        self._iterator = isinstance(batches, collections.abc.Iterator)
        self._carried = _Carried()

    @property
    def device(self):
        return self._device

    def __len__(self):
        return len(self._batches)

    def __iter__(self):
        if self._pass is not None and self._pass.running:
            raise RuntimeError("a Prefetcher serves one loop at a time: the previous `for` over it is still running")
        self._pass = _Pass(self)
        return self._pass.batches()

    def state_dict(self):
        if not hasattr(self._batches, "state_dict"):
            raise TypeError(f"the iterable ({type(self._batches).__name__}) has no state_dict(): wrap one that has "
                            f"(a torchdata StatefulDataLoader) to resume")
        return {"inner": self._state if self._state is not None else self._batches.state_dict()}

    def load_state_dict(self, state):
        if not hasattr(self._batches, "load_state_dict"):
            raise TypeError(f"the iterable ({type(self._batches).__name__}) has no load_state_dict()")
        if self._pass is not None and self._pass.running:
            raise RuntimeError("load_state_dict() while a loop over the Prefetcher runs: finish or leave it first")
        self._batches.load_state_dict(state["inner"])
        self._state = None
        self._carried = _Carried()  # fetched ahead of the old position: the iterable resumes before them


class _Carried:
    """Batches one `for` over an iterator fetched ahead and did not yield, for the next `for`:
    those the ring had copied, as the loop would have had them (with their inner state and the
    event they are ready after), and the one the producer had in hand, not yet handed over."""

    def __init__(self):
        self.ready = collections.deque()  # (batch, state)
        self.ready_after = None  # a torch.cuda.Event after the copies of `ready`, on the GPU
        self.in_hand = []  # [(batch, state)]: at most one
        self.error = None  # what the iterable raised (or a batch's staging) after the loop left: raised after `ready`


class _Pass:
    """One `for` over a Prefetcher: its ring, its producer thread and the batches in flight."""

    def __init__(self, owner):
        self.owner = owner
        self.torch = owner._torch
        host = owner._host_executor
        self.core = _sluice._Prefetcher(owner._device, owner._ahead, _HELD, owner._threads,
                                        **({"jitter_us": host.get("jitter_us", 0), "seed": host.get("seed", 1),
                                            "fail_stage_at": host.get("fail_stage_at")} if host is not None else {}))
        self.meta = collections.deque()  # (spec, inner state) of each batch put, in order
        self.error = None
        self.stopping = False
        self.running = True
        self.stateful = hasattr(owner._batches, "state_dict")
        self.thread = threading.Thread(target=self.produce, name="sluice-prefetch",
                                       daemon=True) if owner._thread else None
        self.source = None  # the iterable's iterator, walked by the loop's thread (thread=False)
        self.put = 0        # batches handed to the ring
        self.taken = 0      # batches taken from the ring
        self.last_put = None  # the position of the last batch handed over
        self.held = collections.deque()  # (position, weak reference to its memory) of the last _HELD batches yielded
        self.leaving = False  # the loop closed the pass (break, or an exception in its body)
        self.carried, owner._carried = owner._carried, _Carried()

    def next_batch(self, source):
        """The iterable's next batch and its state then; StopIteration at its end. The iterable
        runs only once the batch handed over before is read where it lies: one that refills the
        arrays it yielded would otherwise change a batch not yet staged."""
        if self.last_put is not None:
            self.core.wait_read(self.last_put)
        batch = next(source)
        return batch, (self.owner._batches.state_dict() if self.stateful else None)

    def hand_over(self, batch, state):
        flat = flatten(self.torch, batch)
        self.meta.append((flat.spec, state))
        # Returns at once: the ring's own thread stages the batch, and holds `flat`
        # (the arrays) until they are staged or, page-locked, copied.
        self.last_put = self.core.put(flat.pieces, flat)
        self.put += 1

    def batches_in(self):
        """The batches to hand over: the one a `for` left early had in hand, then the iterable's."""
        while self.carried.in_hand:
            yield self.carried.in_hand.pop(0)
        source = iter(self.owner._batches)
        while not self.stopping:  # the loop has left: the iterator is not asked for more
            try:
                yield self.next_batch(source)
            except StopIteration:
                return

    def failed(self, e):
        self.error = e
        self.core.fail(f"{type(e).__name__}: {e}")

    def produce(self):
        try:
            if self.owner._device >= 0:
                # CUDA calls the iterable makes on this thread (PinnedCollate page-locks a worker's file
                # as its first batch arrives) go to the prefetcher's device: a new thread's is device 0.
                self.torch.cuda.set_device(self.owner._device)
            for batch, state in self.batches_in():
                if self.stopping:
                    # The loop has left: the batch goes to the next `for` (over an iterator), not into the ring.
                    self.carried.in_hand.append((batch, state))
                    break
                self.hand_over(batch, state)
            self.core.close()
        except BaseException as e:  # noqa: BLE001 - handed to the loop, raised there as itself
            if not self.stopping:
                self.failed(e)
                return
            # The loop has left: the next `for` over the iterator raises it, after the batches before it.
            self.carried.error = e
            try:
                self.core.close()  # keep_fetched takes what the ring has, then ends
            except Exception:  # noqa: BLE001 - stopped already: nothing waits for the close
                pass

    def pull(self, taken):
        """thread=False: the loop's thread hands over batches until `ahead` are on their way beyond
        the next take (no more: the ring's thread would wait for a take that this thread must make)."""
        while self.source is not None and self.put < taken + self.owner._ahead:
            try:
                batch, state = next(self.source)
            except StopIteration:
                self.source = None
                self.core.close()
                return
            except BaseException as e:  # noqa: BLE001 - raised by the take of this batch, as itself
                self.source = None
                self.failed(e)
                return
            self.hand_over(batch, state)

    def take(self):
        """The next batch from the ring and its inner state; None after the last."""
        device = self.owner._device
        if len(self.held) == _HELD:
            position, memory = self.held.popleft()
            if memory() is not None:  # the loop kept a tensor of it: it keeps its block
                self.core.keep(position)
        stream = self.torch.cuda.current_stream(device).cuda_stream if device >= 0 else 0
        try:
            got = self.core.take(stream)
        except RuntimeError:
            if self.error is not None:
                raise self.error from None
            raise
        if got is None:
            return None
        self.taken += 1
        position, capsule, offsets, memory = got
        spec, state = self.meta.popleft()
        self.held.append((position, weakref.ref(memory)))
        del memory  # only the batch's tensors hold it now
        return rebuild(spec, self.torch.utils.dlpack.from_dlpack(capsule), offsets), state

    def batches(self):
        torch = self.torch
        device = self.owner._device
        try:
            if self.carried.ready_after is not None:
                torch.cuda.current_stream(device).wait_event(self.carried.ready_after)
            while self.carried.ready:  # fetched by a `for` left early, already on the device
                batch, state = self.carried.ready.popleft()
                if self.stateful:
                    self.owner._state = state
                yield batch
                del batch
            if self.carried.error is not None:  # raised by the iterable after that `for` left: here, as itself
                error, self.carried.error = self.carried.error, None
                raise error
            if self.thread is not None:
                self.thread.start()
            else:
                self.source = self.batches_in()
            while True:
                if self.thread is None:
                    self.pull(self.taken)
                got = self.take()
                if got is None:
                    return
                batch, state = got
                if self.stateful:
                    self.owner._state = state
                yield batch
                del batch, got
        except GeneratorExit:
            self.leaving = True
            raise
        finally:
            self.stop()

    def keep_fetched(self):
        """A `for` over an iterator left early: the batches the ring has, taken as the loop would
        take them and each kept in its block, and the one the producer has in hand, go to the
        next `for`. Waits for the producer's batch in hand at most _JOIN_SECONDS."""
        carried = self.owner._carried = self.carried  # whatever happens below, what was taken goes on
        deadline = time.monotonic() + _JOIN_SECONDS
        if self.thread is not None and self.thread.ident is None:
            return  # left while the last `for`'s batches were yielded: no producer ran, the ring is empty
        while not (self.thread is None and self.taken == self.put):  # the loop's thread: every batch put taken
            if not self.core.ready(0.05):
                if time.monotonic() > deadline:
                    warnings.warn(f"the iterable has not handed over a batch in {_JOIN_SECONDS:.0f} s: the batches "
                                  f"fetched ahead of the loop are dropped", RuntimeWarning, stacklevel=5)
                    break
                continue
            try:
                got = self.take()  # as the loop's: a batch it holds keeps its block when the ring moves on
            except Exception as e:  # noqa: BLE001 - a batch that failed to stage: the next `for` raises it there
                carried.error = carried.error or e
                break
            if got is None:
                break
            carried.ready.append(got)
        if self.owner._device >= 0 and carried.ready:
            carried.ready_after = self.torch.cuda.current_stream(self.owner._device).record_event()

    def stop(self):
        if self.core is None:
            return
        self.stopping = True
        # At the interpreter's exit (a loop suspended at module level) nothing is carried or waited for:
        # the producer, a daemon thread, may never run again.
        finalizing = sys.is_finalizing()
        try:
            if self.leaving and self.owner._iterator and self.error is None and not finalizing:
                self.keep_fetched()
        finally:
            self.finish(finalizing)

    def finish(self, finalizing):
        self.core.stop()  # wakes a producer waiting in put(); the copies finish; the arrays are let go
        if (self.thread is not None and self.thread.is_alive() and self.thread is not threading.current_thread()
                and not finalizing):
            self.thread.join(_JOIN_SECONDS)
            if self.thread.is_alive():
                warnings.warn(f"the iterable has not handed over a batch in {_JOIN_SECONDS:.0f} s: the prefetcher's "
                              f"thread ends when it does", RuntimeWarning, stacklevel=4)
        self.running = False
        # Let go of the ring now, in this process, rather than when the cycle collector finds it
        # (perhaps in a DataLoader worker forked later, where its threads and device are not its own).
        self.core = None


Prefetcher.__init__.__signature__ = _options.PREFETCHER.signature(
    ("batches",), trailing=[inspect.Parameter("thread", inspect.Parameter.KEYWORD_ONLY, default=True)])
Prefetcher.__doc__ += "\n" + _options.PREFETCHER.doc()
