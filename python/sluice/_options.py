"""The pipelines' options, from the one table the binding keeps (_sluice.pipeline_options()):
each option's name, default, allowed values and what it does, for signatures and docstrings."""
from __future__ import annotations

import inspect
import textwrap

from . import _sluice

OPTIONS = tuple(_sluice.pipeline_options())  # (name, default, values or None, doc)


def names(with_device=True):
    return [name for name, *_ in OPTIONS if with_device or name != "device"]


def signature(leading=(), with_device=True):
    """`(self, *leading, *, option=default, ...)` for help() and inspect."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in leading]
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
               for name, default, _, _ in OPTIONS if with_device or name != "device"]
    return inspect.Signature(params)


def doc(with_device=True):
    """The options as a docstring section: each with its default, its values and what it does."""
    lines = ["Options (keyword only):"]
    for name, default, values, text in OPTIONS:
        if not with_device and name == "device":
            continue
        head = f"{name}={default!r}"
        if values:
            head += "  (one of " + ", ".join(repr(v) for v in values) + ")"
        lines.append("    " + head)
        lines += textwrap.wrap(text, 88, initial_indent="        ", subsequent_indent="        ")
    return "\n".join(lines)


def given(options, with_device=True):
    """The options a caller gave, refused by name when unknown (before any C++ object is made)."""
    known = names(with_device)
    unknown = [k for k in options if k not in known]
    if unknown:
        raise TypeError(f"unknown option {unknown[0]!r}: the options are {', '.join(known)}")
    return dict(options)
