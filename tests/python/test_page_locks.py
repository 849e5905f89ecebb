"""Memory beside an array the pipeline keeps page-locked is other people's: torch's own copy of fresh
memory that malloc placed there works. A page-locking covers whole pages, so one that reaches past its
array's ends into the first and last pages makes the driver take the neighbours' bytes for page-locked
memory too; a copy that starts there and runs past the locked range is refused ("CUDA error: invalid
argument", the soak's symptom)."""
import numpy as np

import sluice
from sluice import _sluice
from conftest import gpu, torch_or_skip


def live_ranges():
    return [(begin, bytes_) for begin, bytes_, live, _ in _sluice._page_lock_ledger() if live]


@gpu
def test_torch_copies_fresh_arrays_placed_beside_an_array_kept_page_locked():
    torch = torch_or_skip()
    # Small arrays live side by side on malloc's heap, sharing pages with their neighbours.
    a, out = np.arange(5000, dtype=np.float32), np.zeros(5000, np.float32)
    p = sluice.Pipeline()  # host_memory='automatic': it holds the arrays, so it keeps them page-locked
    x, y = p.input(a), p.output(out)
    p.compute(lambda c: c[y].copy_(c[x] + 1))
    for _ in range(3):
        p.run()
    np.testing.assert_array_equal(out, a + 1)
    assert live_ranges(), "the pipeline keeps nothing page-locked: this test shows nothing"
    locked = live_ranges()
    beside = 0
    for n in [1, 3, 100, 1000, 3000, 7000] * 40:
        fresh = np.random.default_rng(n).integers(0, 1 << 20, n).astype(np.float32)
        begin = fresh.__array_interface__["data"][0]
        beside += any(b <= begin < b + size for b, size in locked)
        np.testing.assert_array_equal(torch.from_numpy(fresh).to("cuda").cpu().numpy(), fresh)
    print(f"{beside} fresh arrays began inside a range the pipeline keeps page-locked")
