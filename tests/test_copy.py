"""copy_, clone and clone_preserve_strides against numpy / torch on strided layouts."""

import numpy as np
import pytest
import torch

import etmetal_py
from etmetal_testing import fails, new_handle_out
from etmetal_py import Tensor, ffi, lib

rng = np.random.default_rng(7)


def strided_tensor(base: np.ndarray, sizes, strides, offset=0):
    """A device tensor viewing a copy of `base` with the given element sizes/strides/offset."""
    storage = Tensor.from_array(base, copy=True)
    out = new_handle_out()
    etmetal_py.check(lib.aoti_torch__reinterpret_tensor(
        storage.handle, len(sizes), ffi.new("int64_t[]", list(sizes)),
        ffi.new("int64_t[]", list(strides)), offset, out))
    return Tensor(out[0]), storage


def as_strided(base, sizes, strides, offset=0):
    return np.lib.stride_tricks.as_strided(base[offset:], shape=sizes,
                                           strides=[s * base.itemsize for s in strides])


# (strides, storage offset) per shape: contiguous, transposed or permuted, gapped + offset.
LAYOUTS = {
    (4, 5): [((5, 1), 0), ((1, 4), 0), ((10, 2), 3)],
    (2, 3, 4): [((12, 4, 1), 0), ((1, 2, 6), 1), ((1, 8, 2), 5)],
    (5,): [((1,), 0), ((3,), 2)],
}
PAIRS = [(shape, src, dst) for shape, layouts in LAYOUTS.items()
         for src in layouts for dst in layouts]


@pytest.mark.parametrize("shape,src_layout,dst_layout", PAIRS)
def test_copy_between_strided_layouts(shape, src_layout, dst_layout, no_leaks):
    (src_strides, src_offset), (dst_strides, dst_offset) = src_layout, dst_layout
    src_base = rng.standard_normal(64).astype(np.float32)
    dst_base = rng.standard_normal(64).astype(np.float32)
    src, _src_storage = strided_tensor(src_base, shape, src_strides, src_offset)
    dst, dst_storage = strided_tensor(dst_base, shape, dst_strides, dst_offset)
    etmetal_py.check(lib.aoti_torch_copy_(dst.handle, src.handle, 0))
    expected_storage = dst_base.copy()
    as_strided(expected_storage, shape, dst_strides, dst_offset)[...] = \
        as_strided(src_base, shape, src_strides, src_offset)
    # Only the view's elements change: the gaps between them keep their old values.
    np.testing.assert_array_equal(dst_storage.numpy(), expected_storage)


@pytest.mark.parametrize("src_dtype,dst_dtype", [
    (torch.float32, torch.float16), (torch.float32, torch.bfloat16), (torch.float16, torch.float32),
    (torch.bfloat16, torch.float32), (torch.float64, torch.float32), (torch.float32, torch.float64),
    (torch.float16, torch.bfloat16), (torch.float32, torch.int32), (torch.int64, torch.float32),
    (torch.int64, torch.int32), (torch.float32, torch.bool), (torch.int32, torch.int64),
])
def test_copy_converts_dtypes_like_torch(src_dtype, dst_dtype, no_leaks):
    values = torch.tensor([0.0, -0.0, 1.0, -2.5, 3.14159, 65504.0, 70000.0, 1e-8, 5.960464477539063e-08,
                           2.9802322387695312e-08, 1.00048828125, 1.0009765625, 255.9, -1e30])
    if not src_dtype.is_floating_point:
        values = torch.tensor([0, 1, -7, 123456789, -(2 ** 31), 2 ** 40])
    if not dst_dtype.is_floating_point and dst_dtype != torch.bool:
        # Out-of-range float -> int conversion is undefined behaviour in C and torch alike.
        values = values[values.abs() < 2 ** 31]
    src_values = values.to(src_dtype)
    src = Tensor.from_array(src_values, copy=True)
    dst = Tensor.empty(src.sizes, dst_dtype)
    etmetal_py.check(lib.aoti_torch_copy_(dst.handle, src.handle, 0))
    expected = src_values.to(dst_dtype)
    got = dst.torch()
    assert got.dtype == dst_dtype
    assert torch.equal(got, expected) or torch.allclose(got.double(), expected.double(), equal_nan=True) \
        and (got == expected).all(), (got, expected)


def test_float16_and_bfloat16_round_to_nearest_even_exhaustively(no_leaks):
    # Every float32 whose upper bits hit the rounding boundaries of half and bfloat16.
    bits = rng.integers(0, 2 ** 32, size=20000, dtype=np.uint64).astype(np.uint32)
    bits = np.concatenate([bits, (np.arange(-4, 5) + 0x8000).astype(np.uint32) + (0x3f80 << 16),
                           np.array([0x33000000, 0x33000001, 0x387fe000, 0x477fefff, 0x477ff000],
                                    dtype=np.uint32)])
    floats = bits.view(np.float32)
    floats = floats[~np.isnan(floats)]
    src = Tensor.from_array(floats, copy=True)
    for dtype in (torch.float16, torch.bfloat16):
        dst = Tensor.empty([floats.size], dtype)
        etmetal_py.check(lib.aoti_torch_copy_(dst.handle, src.handle, 0))
        expected = torch.from_numpy(floats).to(dtype)
        assert torch.equal(dst.torch().view(torch.int16), expected.view(torch.int16)), dtype


def test_copy_broadcasts_the_source(no_leaks):
    row = np.arange(4, dtype=np.float32)
    src = Tensor.from_array(row, copy=True)
    dst = Tensor.empty([3, 4])
    etmetal_py.check(lib.aoti_torch_copy_(dst.handle, src.handle, 0))
    np.testing.assert_array_equal(dst.numpy(), np.broadcast_to(row, (3, 4)))
    bad = Tensor.empty([3, 5])
    fails(lib.aoti_torch_copy_(bad.handle, src.handle, 0), "broadcast")


def test_clone_and_clone_preserve_strides(no_leaks):
    base = rng.standard_normal(40).astype(np.float32)
    view, _storage = strided_tensor(base, (3, 4), (1, 6), 5)
    expected = as_strided(base, (3, 4), (1, 6), 5)
    out = new_handle_out()
    etmetal_py.check(lib.aoti_torch_clone(view.handle, out))
    clone = Tensor(out[0])
    assert clone.strides == (4, 1) and clone.storage_offset == 0
    np.testing.assert_array_equal(clone.numpy(), expected)
    etmetal_py.check(lib.aoti_torch_clone_preserve_strides(view.handle, out))
    kept = Tensor(out[0])
    assert kept.strides == (1, 6) and kept.storage_offset == 0
    np.testing.assert_array_equal(kept.numpy(), expected)
    assert kept.data_ptr != view.data_ptr


def test_writes_through_non_packed_views_reach_the_storage(no_leaks):
    """The ExecuTorch defect: writes through a non-packed view must not go to a copy."""
    storage = Tensor.from_array(np.zeros(16, dtype=np.float32), copy=True)
    out = new_handle_out()
    etmetal_py.check(lib.aoti_torch__reinterpret_tensor(
        storage.handle, 2, ffi.new("int64_t[]", [2, 3]), ffi.new("int64_t[]", [8, 2]), 1, out))
    view = Tensor(out[0])
    ones = Tensor.from_array(np.ones((2, 3), dtype=np.float32), copy=True)
    etmetal_py.check(lib.aoti_torch_copy_(view.handle, ones.handle, 0))
    expected = np.zeros(16, dtype=np.float32)
    expected[[1, 3, 5, 9, 11, 13]] = 1
    np.testing.assert_array_equal(storage.numpy(), expected)


def test_copy_into_host_tensor(no_leaks):
    values = rng.standard_normal((3, 3)).astype(np.float32)
    device = Tensor.from_array(values, copy=True)
    host = Tensor.empty([3, 3], device=etmetal_py.CPU)
    etmetal_py.check(lib.aoti_torch_copy_(host.handle, device.handle, 0))
    np.testing.assert_array_equal(host.numpy(), values)
