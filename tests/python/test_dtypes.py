"""Every element type a CPU tensor or NumPy array carries, as it is on the device: bfloat16 and
other types NumPy lacks travel as same-size integers and are typed again by chunk[handle]; an array
in non-native byte order is refused (the GPU would read every value wrong)."""
import numpy as np
import pytest

import sluice
from sluice._arrays import as_host_array
from conftest import gpu, torch_or_skip


def test_a_bfloat16_tensor_is_taken_as_its_bytes_and_typed_as_bfloat16():
    torch = torch_or_skip()
    t = torch.tensor([1.5, -2.0, 3.25, 1e30], dtype=torch.bfloat16)
    view, owner, dtype = as_host_array(t, writable=True)
    assert dtype == torch.bfloat16 and owner is t
    assert view.itemsize == 2 and view.shape == (4,)
    assert view.__array_interface__["data"][0] == t.data_ptr()  # its memory, not a copy
    np.testing.assert_array_equal(view, t.view(torch.int16).numpy())


@pytest.mark.parametrize("typestr", [">f4", ">i8", ">u2"])
def test_an_array_in_non_native_byte_order_is_refused(typestr):
    p = sluice.Pipeline()
    with pytest.raises(TypeError, match="non-native byte order"):
        p.input(np.arange(10).astype(typestr))
    with pytest.raises(TypeError, match="non-native byte order"):
        p.output(np.zeros(10, typestr))


def test_native_and_single_byte_types_are_taken():
    for array in (np.arange(4, dtype="<f4"), np.arange(4, dtype=np.uint8), np.zeros(4, np.complex64)):
        view, _, dtype = as_host_array(array, writable=True)
        assert dtype == array.dtype


@gpu
def test_bfloat16_tensors_in_and_out():
    torch = torch_or_skip()
    n = 100_000
    a = (torch.arange(n) % 251).to(torch.bfloat16)  # exact in bfloat16
    out = torch.full((n,), float("nan"), dtype=torch.bfloat16)
    p = sluice.Pipeline(chunk_items=30_000)
    x, y = p.input(a), p.output(out)
    dtypes = set()

    def fn(c):
        dtypes.add((c[x].dtype, c[y].dtype))
        torch.mul(c[x], 2, out=c[y])

    p.compute(fn)
    p.run()
    assert dtypes == {(torch.bfloat16, torch.bfloat16)}
    assert torch.equal(out, (torch.arange(n) % 251 * 2).to(torch.bfloat16))


@gpu
def test_complex_and_half_arrays_keep_their_type_on_the_device():
    torch = torch_or_skip()
    a = (np.arange(1000) + 1j * np.arange(1000)).astype(np.complex64)
    out = np.zeros(1000, np.complex64)
    h, h_out = np.arange(1000, dtype=np.float16), np.zeros(1000, np.float16)
    p = sluice.Pipeline()
    x, y, hx, hy = p.input(a), p.output(out), p.input(h), p.output(h_out)
    p.compute(lambda c: (c[y].copy_(c[x] * 2), c[hy].copy_(c[hx] + 1)))
    p.run()
    np.testing.assert_array_equal(out, a * 2)
    np.testing.assert_array_equal(h_out, h + 1)
