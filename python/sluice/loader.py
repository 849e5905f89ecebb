"""Training batches: TokenLoader (llm.c token shards, on the GPU ahead of the step) and the
BatchPlan that orders them (see sluice::TokenLoader and sluice::BatchPlan)."""
from __future__ import annotations

import inspect
import warnings

from . import _options, _sluice
from ._arrays import torch_or_none
from .job import job_place

_STATE_KEYS = ("epoch", "sample")


def _state_position(state):
    missing = [k for k in _STATE_KEYS if k not in state]
    if missing:
        raise ValueError(f"not a loader state: it has no {', '.join(missing)} "
                         f"(a state comes from state_dict(): epoch, sample, global_batch, ...)")
    return int(state["epoch"]), int(state["sample"])


class BatchPlan:
    """Which items each batch of each epoch holds, for one rank; host-only, no GPU needed.

    The order is global: each epoch's order (a seeded shuffle, different each epoch, or
    in order) is cut into global batches of batch x world items, and rank r reads the
    slice [r batch, (r + 1) batch) of each. Every rank serves the same number of batches:
    the tail that does not fill a global batch is dropped with drop_last, padded with the
    epoch's first items when world > 1, and served short when world is 1. A state
    ({"epoch", "sample"}) resumes on any number of ranks.

    It is what TokenLoader uses; a torch DataLoader can use it too, as its batch sampler
    (DataLoader(dataset, batch_sampler=plan)), to read the same samples in the same order:
    iterating yields this rank's items of each batch, as lists of ints. As with TokenLoader,
    one pass of `for` is one epoch (or what is left of it) and the next `for` goes on with
    the next epoch; state_dict() is the place reached, load_state_dict() resumes there.
    """

    def __init__(self, items, *, batch, shuffle=False, seed=0, rank=None, world=None, drop_last=False):
        place = job_place(rank, world)
        self.rank, self.world = place.rank, place.world
        self.batch, self.shuffle, self.seed, self.drop_last = batch, shuffle, seed, drop_last
        self._plan = _sluice._BatchPlan(items, batch, shuffle, seed, place.rank, place.world, drop_last)
        self._at = {"epoch": 0, "sample": 0}  # where the next `for` starts

    @property
    def items(self):
        return self._plan.items

    @property
    def global_batch(self):
        return self._plan.global_batch

    def __len__(self):
        """Batches each rank serves in an epoch."""
        return self._plan.batches_per_epoch

    def __iter__(self):
        """This rank's items of each batch from the place reached to the end of its epoch."""
        at = self.start(self._at)
        epoch = at["epoch"]
        while at["epoch"] == epoch:
            items = list(self.batch_items(at))
            at = self.next(at)
            self._at = at  # a batch handed out is served, even if the caller stops here
            yield items

    def state_dict(self):
        return dict(self._at)

    def load_state_dict(self, state):
        self._at = self.start(state)

    def start(self, state=None):
        """The position a state resumes at under this plan (the first batch when state is None)."""
        if state is None:
            return {"epoch": 0, "sample": 0}
        epoch, sample = self._plan.resume_at(*_state_position(state))
        return {"epoch": epoch, "sample": sample}

    def batch_items(self, state):
        """This rank's items of the batch at `state`."""
        return self._plan.batch_items(*_state_position(state))

    def next(self, state):
        epoch, sample = self._plan.next(*_state_position(state))
        return {"epoch": epoch, "sample": sample}

    def batches_left(self, state):
        return self._plan.batches_left(*_state_position(state))

    def epoch(self, state):
        """(state, items) of every batch from `state` to the end of its epoch."""
        state = self.start(state)
        epoch = state["epoch"]
        while state["epoch"] == epoch:
            yield state, self.batch_items(state)
            state = self.next(state)


class TokenLoader:
    """Training batches from llm.c token shards, on the GPU before the step asks (see sluice::TokenLoader).

    Iterating yields (inputs, targets): int32 CUDA tensors of batch x seq, ready on
    torch's current stream (the stream waits on the batch; the host does not).
    A batch's memory is reused once the next batch is taken: clone what you keep.
    One pass of `for` is one epoch (or what is left of it); the next `for` goes on
    with the next epoch.

    rank and world come from an initialized torch.distributed process group, else
    from RANK and WORLD_SIZE, unless given; LOCAL_RANK picks the GPU unless `device`
    is given. `batch` is this rank's rows; batch x world is the global batch. Every
    rank serves the same number of batches an epoch (see BatchPlan for the tail).

    state_dict() is the job's place in its data, the same on every rank. It resumes
    on any number of ranks: with the same global batch, the same global batches follow,
    sample for sample; with another, the epoch goes on at the same sample with the new
    global batches (the samples it had not served yet, each once), and later epochs are
    the new global batch's own.
    """

    def __init__(self, files, *, batch, seq, state=None, **options):
        if isinstance(files, str):
            files = [files]
        options = _options.LOADER.filled(options, leave_out=("batch",))
        place = job_place(options["rank"], options["world"], options["device"])
        options.update(rank=place.rank, world=place.world, device=place.device)
        self._args = dict(files=list(files), seq=seq, batch=batch, **options)
        self._core = None
        start = self._checked_start(state) if state is not None else (0, 0)
        self._core = self._make(start)

    def _make(self, start):
        epoch, sample = start
        return _sluice._TokenLoader(epoch=epoch, sample=sample, **self._args)

    def _checked_start(self, state):
        """Where a saved state resumes, refused (before any work) when it cannot resume here."""
        position = _state_position(state)
        for key in ("seed", "shuffle"):
            if key in state and state[key] != self._args[key]:
                raise ValueError(f"the state was saved with {key}={state[key]!r}, this loader has "
                                 f"{key}={self._args[key]!r}: the order of its samples would differ")
        if "windows" in state:
            windows = _sluice.count_windows(self._args["files"], self._args["seq"])
            if state["windows"] != windows:
                raise ValueError(f"the state was saved over {state['windows']} windows of {self._args['seq']} tokens, "
                                 f"these shards hold {windows}: it belongs to other data")
        global_batch = self._args["batch"] * self._args["world"]
        if "global_batch" in state and state["global_batch"] != global_batch:
            warnings.warn(f"resuming a state saved with a global batch of {state['global_batch']} with one of "
                          f"{global_batch}: the epoch goes on at sample {position[1]} with the new batches",
                          stacklevel=3)
        return position

    @property
    def device(self):
        return self._core.device

    @property
    def global_batch(self):
        return self._core.global_batch

    def __len__(self):
        return self._core.batches_per_epoch

    def __iter__(self):
        torch = torch_or_none()
        if torch is None:
            raise RuntimeError("TokenLoader yields torch tensors and torch is not installed")
        current_stream = torch.cuda.current_stream
        from_dlpack = torch.utils.dlpack.from_dlpack
        device = self._core.device
        while True:
            x, y, epoch, sample, last = self._core.next(current_stream(device).cuda_stream)
            yield from_dlpack(x), from_dlpack(y)
            if last:
                return

    def state_dict(self):
        epoch, sample = self._core.state()
        return {"epoch": epoch, "sample": sample, "global_batch": self._core.global_batch,
                "windows": self._core.windows, "seed": self._args["seed"], "shuffle": self._args["shuffle"],
                "world": self._args["world"]}

    def load_state_dict(self, state):
        """Resumes at `state`: the batches that follow are the ones the saving job would have seen next."""
        start = self._checked_start(state)
        # This loader's readers stop and its copies finish first; its last batch's memory is
        # freed in the order of the stream that took it, without waiting for the device.
        self._core = None
        self._core = self._make(start)

    def idle(self):
        """How long the consumer's stream waited for data: steps, fill_ms, waited_ms, loop_ms, idle_fraction."""
        return self._core.idle()


TokenLoader.__init__.__signature__ = _options.LOADER.signature(
    ("files",),
    keyword=[inspect.Parameter("batch", inspect.Parameter.KEYWORD_ONLY),
             inspect.Parameter("seq", inspect.Parameter.KEYWORD_ONLY)],
    trailing=[inspect.Parameter("state", inspect.Parameter.KEYWORD_ONLY, default=None)],
    leave_out=("batch",))
TokenLoader.__doc__ += "\n" + _options.LOADER.doc(leave_out=("batch",))
