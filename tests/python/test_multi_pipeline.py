"""MultiPipeline from Python: shares of the items over several pipelines (one GPU named twice here)."""
import numpy as np
import pytest

import sluice
from conftest import gpu, torch_or_skip


@gpu
def test_two_parts_on_one_gpu_give_numpys_result_and_their_shares():
    torch = torch_or_skip()
    n = 1_000_003
    a = np.random.default_rng(1).random(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    p = sluice.MultiPipeline([0, 0], chunk_items=100_000)
    x, y = p.input(a), p.output(out)
    parts = set()

    def fn(c, part):
        parts.add(part)
        assert c.device == 0
        torch.mul(c[x], 3, out=c[y])

    p.compute(fn)
    report = p.run()
    np.testing.assert_array_equal(out, a * 3)
    assert parts == {0, 1}
    assert report.item_count == n and len(report.parts) == 2
    assert report.parts[0].items[0] == 0 and report.parts[-1].items[1] == n
    assert report.parts[0].items[1] == report.parts[1].items[0]
    p.set_weights([1, 3])  # the next run's shares: a quarter and three quarters (in whole granules)
    out[:] = np.nan
    report = p.run()
    np.testing.assert_array_equal(out, a * 3)
    assert 0.2 < report.parts[0].items[1] / n < 0.3


@gpu
def test_bad_devices_and_arrays_are_refused():
    torch_or_skip()
    with pytest.raises(ValueError, match="does not exist"):
        sluice.MultiPipeline([0, 99])
    p = sluice.MultiPipeline([0])
    with pytest.raises(TypeError, match="not a list"):
        p.output([1.0, 2.0])
