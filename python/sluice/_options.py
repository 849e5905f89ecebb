"""Every product's options, from the one table the binding keeps for each (_sluice.pipeline_options(),
loader_options(), prefetcher_options(), streamed_weights_options()): each option's name, default,
allowed values and what it does, for signatures, docstrings and the defaults the Python classes use.
The defaults are the C++ options structs' own."""
from __future__ import annotations

import inspect
import textwrap

from . import _sluice

# How far ahead of its consumer any product's producer may run (sluice/core/ahead.hpp).
MOST_AHEAD = _sluice.most_ahead


class Table:
    """One product's options, in order: (name, default, values or None, doc)."""

    def __init__(self, rows, *, overrides=None):
        # overrides: {name: (default, doc)} where the Python class decides an option otherwise (a rank
        # read from torch.distributed when None).
        overrides = overrides or {}
        self.rows = tuple((name, *overrides[name][:1], values, overrides[name][1]) if name in overrides
                          else (name, default, values, doc) for name, default, values, doc in rows)

    def names(self, leave_out=()):
        return [name for name, *_ in self.rows if name not in leave_out]

    def default(self, name):
        return next(default for n, default, *_ in self.rows if n == name)

    def parameters(self, leave_out=()):
        return [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
                for name, default, _, _ in self.rows if name not in leave_out]

    def signature(self, leading=(), keyword=(), trailing=(), leave_out=()):
        """`(self, *leading, *, *keyword, option=default, ..., *trailing)` for help() and inspect:
        `leading` positional names, `keyword` keyword-only Parameters before the options, `trailing` after."""
        params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        params += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in leading]
        params += list(keyword) + self.parameters(leave_out) + list(trailing)
        return inspect.Signature(params)

    def doc(self, leave_out=()):
        """The options as a docstring section: each with its default, its values and what it does."""
        lines = ["Options (keyword only):"]
        for name, default, values, text in self.rows:
            if name in leave_out:
                continue
            head = f"{name}={default!r}"
            if values:
                head += "  (one of " + ", ".join(repr(v) for v in values) + ")"
            lines.append("    " + head)
            lines += textwrap.wrap(text, 88, initial_indent="        ", subsequent_indent="        ")
        return "\n".join(lines)

    def given(self, options, leave_out=()):
        """The options a caller gave, refused by name when unknown (before any C++ object is made)."""
        known = self.names(leave_out)
        unknown = [k for k in options if k not in known]
        if unknown:
            raise TypeError(f"unknown option {unknown[0]!r}: the options are {', '.join(known)}")
        return dict(options)

    def filled(self, options, leave_out=()):
        """Every option: the given ones, and the table's defaults for the rest."""
        given = self.given(options, leave_out)
        return {name: given.get(name, default) for name, default, *_ in self.rows if name not in leave_out}


PIPELINE = Table(_sluice.pipeline_options())
# The placed options are None by default in Python: the job's rank and world and the GPU come from
# torch.distributed or the environment (sluice.job).
LOADER = Table(_sluice.loader_options(), overrides={
    "rank": (None, "this process's share of a data-parallel job; None: from torch.distributed, else RANK"),
    "world": (None, "the job's ranks; None: from torch.distributed, else WORLD_SIZE"),
    "device": (None, "the GPU to load onto; None: LOCAL_RANK's, else CUDA's current device"),
})
PREFETCHER = Table(_sluice.prefetcher_options())
STREAMED_WEIGHTS = Table(_sluice.streamed_weights_options())
