"""A chunk gives a span's device memory for that pipeline's own handles only; no GPU needed to check."""
from types import SimpleNamespace

import numpy as np
import pytest

import sluice


class Owner:
    """What a chunk reads of its pipeline: the handles, and the views already made (one is poisoned)."""

    def __init__(self):
        self._handles = [sluice.Handle(0, np.dtype("float32"), (), "input")]
        self._views = {(0, 0x1000, 10): "this pipeline's view of span 0"}
        self._core = None


def chunk_of(owner):
    info = SimpleNamespace(index=0, count=1, begin=0, end=10, stream=0, slots=[0x1000])
    return sluice.Chunk(owner, info, device=0)


def test_a_handle_of_another_pipeline_never_reaches_this_ones_views():
    # Its index and the slot match a view this pipeline made: the handle must still be refused.
    owner = Owner()
    foreign = sluice.Handle(0, np.dtype("float32"), (), "input")
    with pytest.raises(ValueError, match="is not a span of this pipeline"):
        chunk_of(owner)[foreign]
    with pytest.raises(ValueError, match="is not a span of this pipeline"):
        chunk_of(owner).cupy(foreign)


def test_an_index_where_a_handle_belongs_says_so():
    with pytest.raises(TypeError, match="a chunk is indexed by a span handle .* not int"):
        chunk_of(Owner())[0]
