"""The shape and layout fallbacks (aoti_torch_mps_cat, _pad, _reshape, _permute, _narrow,
_slice_Tensor, _squeeze_dim, _view_dtype) against torch eager on CPU: values exactly (they
move elements without arithmetic), result sizes, and for the views the strides and storage
offset torch's view has; over dtypes, strided and offset inputs, empty and 0-dim tensors, and
bad input."""

import pytest
import torch
import torch.nn.functional as F

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from etmetal_testing import fails
from ops_testing import as_device, no_leaks_in_module, poisoning_failure  # noqa: F401

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.uint8, torch.bool]


def sample(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(shape, generator=g) * 50
    return (values > 0) if dtype == torch.bool else values.to(dtype)


def result(code, r0, *keep):
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0])


def check_view(got, want):
    assert got.sizes == tuple(want.shape)
    assert got.strides == tuple(want.stride())
    assert got.storage_offset == want.storage_offset()
    # Bitwise: a dtype view may show NaN payloads.
    as_bytes = lambda t: t.contiguous().reshape(-1).view(torch.uint8)  # noqa: E731
    assert torch.equal(as_bytes(got.torch()), as_bytes(want))


def call_cat(tensors, dim):
    devices = [as_device(t) for t in tensors]
    handles = ffi.new("AtenTensorHandle[]", [d.handle for d in devices] or 1)
    r0 = ffi.new("AtenTensorHandle*")
    return lib.aoti_torch_mps_cat(handles, len(devices), dim, r0), r0


def cat(tensors, dim):
    code, r0 = call_cat(tensors, dim)
    return result(code, r0).torch()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cat_matches_torch(dtype):
    a, b, c = sample((2, 3, 4), dtype, 1), sample((2, 5, 4), dtype, 2), sample((2, 1, 4), dtype, 3)
    for dim in (1, -2):
        assert torch.equal(cat([a, b, c], dim), torch.cat([a, b, c], dim))
    assert torch.equal(cat([a, a], 0), torch.cat([a, a], 0))
    assert torch.equal(cat([a, a], -1), torch.cat([a, a], -1))


def test_cat_strided_views_empty_parts_and_one_tensor():
    base = sample((6, 8, 5), torch.float32)
    views = [base[:5, ::2, :3], base.transpose(1, 2)[:5, 1:3, :3], base[1:, 1:5, 2:]]
    assert torch.equal(cat(views, 1), torch.cat(views, 1))
    empty_part = base[:, :0]
    assert torch.equal(cat([base, empty_part, base], 1), torch.cat([base, empty_part, base], 1))
    legacy_empty = torch.empty(0)  # 1-D and empty: skipped whatever its shape
    assert torch.equal(cat([legacy_empty, base, legacy_empty], 2), torch.cat([legacy_empty, base, legacy_empty], 2))
    assert torch.equal(cat([base], 0), base)
    assert cat([legacy_empty, legacy_empty], 0).shape == (0,)


def test_cat_bad_input():
    a = sample((2, 3), torch.float32)
    poisoning_failure(call_cat([a, sample((2, 3), torch.float16)], 0)[0], "same dtype")
    poisoning_failure(call_cat([a, sample((3, 3), torch.float32)], 1)[0], "Expected size 2 but got size 3")
    poisoning_failure(call_cat([a, sample((2, 3, 1), torch.float32)], 0)[0], "same number of dimensions")
    poisoning_failure(call_cat([a, a], 2)[0], "out of range")
    poisoning_failure(call_cat([torch.tensor(1.0)], 0)[0], "zero-dimensional")
    poisoning_failure(call_cat([], 0)[0], "non-empty list")


def call_pad(x, pads, mode, value=None):
    t = as_device(x)
    r0 = ffi.new("AtenTensorHandle*")
    value_ptr = ffi.NULL if value is None else ffi.new("double*", value)
    code = lib.aoti_torch_mps_pad(t.handle, ffi.new("int64_t[]", pads or [0]), len(pads), mode.encode(),
                                  value_ptr, r0)
    return code, r0


def pad(x, pads, mode, value=None):
    code, r0 = call_pad(x, pads, mode, value)
    return result(code, r0).torch()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_constant_pad_matches_torch(dtype):
    x = sample((3, 4, 5), dtype)
    value = 1 if dtype == torch.bool else 7.5
    for pads in ([1, 2], [0, 0, 2, 1], [1, 1, 1, 1, 1, 1], [-1, 2, 0, -2], []):
        want = torch.ops.aten.pad(x, pads, "constant", value)
        assert torch.equal(pad(x, pads, "constant", value), want), pads
    assert torch.equal(pad(x, [2, 2], "constant"), torch.ops.aten.pad(x, [2, 2], "constant", None))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.uint8], ids=str)
def test_non_constant_pads_match_torch(mode, dtype):
    cases = [((2, 3, 7), [2, 3]), ((1, 2, 5, 6), [1, 2, 3, 0]), ((2, 4, 5), [1, 1, 2, 2]),
             ((1, 2, 3, 4, 5), [1, 2, 2, 1, 0, 2]), ((5, 6), [3, 2])]
    for shape, pads in cases:
        x = sample(shape, dtype)
        if dtype in (torch.int64, torch.uint8) and mode != "circular":
            want = F.pad(x.float(), pads, mode).to(dtype)  # torch's CPU kernels are float-only here
        else:
            want = F.pad(x, pads, mode)
        assert torch.equal(pad(x, pads, mode), want), (shape, pads)


def test_pad_strided_empty_and_zero_dim():
    base = sample((6, 9, 8), torch.float32)
    view = base.transpose(1, 2)[1:5, ::2]
    for mode in ("constant", "reflect", "replicate", "circular"):
        assert torch.equal(pad(view, [1, 2, 2, 1], mode), F.pad(view, [1, 2, 2, 1], mode)), mode
    empty = torch.empty(2, 0, 3)
    assert torch.equal(pad(empty, [1, 1, 2, 0], "constant", 3.0), F.pad(empty, [1, 1, 2, 0], value=3.0))
    scalar = torch.tensor(2.5)
    assert torch.equal(pad(scalar, [], "constant"), scalar)


def test_pad_bad_input():
    x = sample((2, 3, 4), torch.float32)
    poisoning_failure(call_pad(x, [1], "constant")[0], "divisible by 2")
    poisoning_failure(call_pad(x, [1, 1] * 4, "constant")[0], "at most twice")
    poisoning_failure(call_pad(x, [4, 0], "reflect")[0], "less than the corresponding input dimension")
    poisoning_failure(call_pad(x, [5, 0], "circular")[0], "more than once")
    poisoning_failure(call_pad(x, [1, 1], "reflect", 2.0)[0], "doesn't take in value")
    poisoning_failure(call_pad(x, [1, 1], "wrap")[0], "unrecognised padding mode")
    poisoning_failure(call_pad(x, [-3, -2], "constant")[0], "negative output size")
    poisoning_failure(call_pad(sample((4,), torch.float32), [1, 1], "replicate")[0], "2D, 3D, 4D, 5D")


def call_reshape(x, shape):
    t = as_device(x)
    r0 = ffi.new("AtenTensorHandle*")
    code = lib.aoti_torch_mps_reshape(t.handle, ffi.new("int64_t[]", list(shape) or [0]), len(shape), r0)
    return code, r0, t


def test_reshape_views_where_torch_does_and_copies_otherwise():
    base = sample((4, 6, 5), torch.float32)
    cases = [(base, (24, 5)), (base, (-1,)), (base, (2, 2, 3, 2, 5)), (base[:, 1:5], (4, 2, 2, 5)),
             (base.transpose(0, 1), (6, 20)), (base[:, :, ::2], (-1, 3)), (base[1:2], (6, 5, 1)),
             (torch.tensor(3.0), (1, 1)), (sample((1, 1), torch.float32), ()), (torch.empty(0, 4), (2, 0, 2)), (torch.empty(0, 4), (-1, 8))]
    for x, shape in cases:
        code, r0, keep = call_reshape(x, shape)
        got = result(code, r0, keep)
        want = x.reshape(shape)
        assert got.sizes == tuple(want.shape)
        assert torch.equal(got.torch(), want), shape
        if want._base is not None and x.numel() > 0:  # torch made a view: so must etmetal
            assert got.strides == tuple(want.stride()) and got.storage_offset == want.storage_offset()


def test_reshape_bad_input():
    x = sample((4, 6), torch.float32)
    poisoning_failure(call_reshape(x, (5, 5))[0], "invalid for input of size 24")
    poisoning_failure(call_reshape(x, (-1, -1))[0], "only one dimension can be inferred")
    poisoning_failure(call_reshape(torch.empty(0, 3), (0, -1))[0], "can be any value")


def view_call(function, x, *args):
    t = as_device(x)
    r0 = ffi.new("AtenTensorHandle*")
    return function(t.handle, *args, r0), r0, t


def check_view_call(function, x, args, want):
    code, r0, keep = view_call(function, x, *args)
    got = result(code, r0)
    # Views over the device copy of x's whole storage: offsets and strides compare directly.
    check_view(got, want)
    del keep


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool], ids=str)
def test_views_match_torch(dtype):
    base = sample((4, 6, 5), dtype)
    view = base[1:, ::2]
    check_view_call(lib.aoti_torch_mps_permute, view, (ffi.new("int64_t[]", [2, 0, 1]), 3), view.permute(2, 0, 1))
    check_view_call(lib.aoti_torch_mps_permute, view, (ffi.new("int64_t[]", [-1, 1, 0]), 3), view.permute(-1, 1, 0))
    check_view_call(lib.aoti_torch_mps_narrow, view, (1, 1, 2), view.narrow(1, 1, 2))
    check_view_call(lib.aoti_torch_mps_narrow, view, (-1, -3, 3), view.narrow(-1, -3, 3))
    check_view_call(lib.aoti_torch_mps_narrow, view, (0, 3, 0), view.narrow(0, 3, 0))
    for start, end, step in ((1, 5, 2), (None, None, 1), (-4, None, 3), (None, -1, 1), (10, 20, 1), (-100, 2, 1),
                             (3, 1, 1)):
        s = ffi.NULL if start is None else ffi.new("int64_t*", start)
        e = ffi.NULL if end is None else ffi.new("int64_t*", end)
        want = torch.ops.aten.slice.Tensor(view, 2, start, end, step)
        check_view_call(lib.aoti_torch_mps_slice_Tensor, view, (2, s, e, step), want)
    check_view_call(lib.aoti_torch_mps_squeeze_dim, base[:, 2:3], (1,), base[:, 2:3].squeeze(1))
    check_view_call(lib.aoti_torch_mps_squeeze_dim, view, (1,), view.squeeze(1))
    check_view_call(lib.aoti_torch_mps_squeeze_dim, torch.tensor(1.5), (-1,), torch.tensor(1.5).squeeze(-1))
    check_view_call(lib.aoti_torch_mps_permute, torch.tensor(1.5), (ffi.new("int64_t[]", [0]), 0),
                    torch.tensor(1.5).permute(()))


def test_view_dtype_matches_torch():
    x = sample((4, 8), torch.float32)
    codes = {torch.int32: 3, torch.float16: 5, torch.uint8: 0, torch.int64: 4, torch.bfloat16: 15}
    for view in (x, x[1:3], x[:, 2:6]):
        for dtype in (torch.int32, torch.float16, torch.uint8, torch.bfloat16):
            check_view_call(lib.aoti_torch_mps_view_dtype, view, (codes[dtype],), view.view(dtype))
    check_view_call(lib.aoti_torch_mps_view_dtype, x[2:], (codes[torch.int64],), x[2:].view(torch.int64))
    check_view_call(lib.aoti_torch_mps_view_dtype, torch.tensor(1.5), (codes[torch.int32],),
                    torch.tensor(1.5).view(torch.int32))


def test_view_bad_input():
    x = sample((4, 6), torch.float32)
    fails(view_call(lib.aoti_torch_mps_permute, x, ffi.new("int64_t[]", [0, 0]), 2)[0], "duplicate dims")
    fails(view_call(lib.aoti_torch_mps_permute, x, ffi.new("int64_t[]", [0]), 1)[0], "number of dims")
    fails(view_call(lib.aoti_torch_mps_narrow, x, 1, 4, 3)[0], "exceeds dimension size")
    fails(view_call(lib.aoti_torch_mps_narrow, torch.tensor(1.0), 0, 0, 1)[0], "0-dim")
    fails(view_call(lib.aoti_torch_mps_slice_Tensor, x, 0, ffi.NULL, ffi.NULL, 0)[0], "step must be positive")
    fails(view_call(lib.aoti_torch_mps_squeeze_dim, x, 2)[0], "out of range")
    fails(view_call(lib.aoti_torch_mps_view_dtype, x[:, 1:], 4)[0], "divisible by 2")
    fails(view_call(lib.aoti_torch_mps_view_dtype, x.t(), 5)[0], "stride(-1) must be 1")
    fails(view_call(lib.aoti_torch_mps_view_dtype, torch.tensor(1.0), 5)[0], "cannot be 0")
    etmetal_py.synchronize()  # views fail without poisoning the stream


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fill_matches_torch_on_views(dtype):
    base = sample((5, 6, 4), dtype)
    view = base.transpose(0, 2)[1:, ::2]
    device = as_device(view)
    value = {torch.bool: 1.0, torch.uint8: 200.0}.get(dtype, -3.75)
    assert lib.aoti_torch_mps_fill__Scalar(device.handle, value) == 0, etmetal_py.last_error()
    expected = base.clone()
    expected.transpose(0, 2)[1:, ::2].fill_(value)
    whole = device.device_base.torch()
    assert torch.equal(whole.view(-1)[:expected.numel()].view(expected.shape), expected)
    for empty_or_scalar in (torch.empty(3, 0, dtype=dtype), torch.zeros((), dtype=dtype)):
        t = as_device(empty_or_scalar)
        assert lib.aoti_torch_mps_fill__Scalar(t.handle, value) == 0
        assert torch.equal(t.torch(), empty_or_scalar.clone().fill_(value))


def test_efficientzerotensor_is_zeros():
    r0 = ffi.new("AtenTensorHandle*")
    for size, dtype in (((3, 4), None), ((), torch.float16), ((2, 0), torch.int64)):
        code = lib.aoti_torch_mps__efficientzerotensor(
            ffi.new("int64_t[]", list(size) or [0]), len(size), ffi.NULL if dtype is None else ffi.new("int32_t*", {
                torch.float16: 5, torch.int64: 4}[dtype]), ffi.NULL, ffi.NULL, 0, ffi.NULL, r0)
        got = result(code, r0).torch()
        assert torch.equal(got, torch.zeros(size, dtype=dtype or torch.float32))


def test_fill_and_zeros_bad_input():
    for dtype, value in ((torch.uint8, -1.0), (torch.uint8, 256.0), (torch.int8, 128.0), (torch.int32, 2.0 ** 31)):
        target = as_device(torch.zeros(2, dtype=dtype))
        poisoning_failure(lib.aoti_torch_mps_fill__Scalar(target.handle, value), "without overflow")
    r0 = ffi.new("AtenTensorHandle*")
    poisoning_failure(lib.aoti_torch_mps__efficientzerotensor(ffi.new("int64_t[]", [-2]), 1, ffi.NULL, ffi.NULL,
                                                              ffi.NULL, 0, ffi.NULL, r0), "negative dimension")
    poisoning_failure(lib.aoti_torch_mps__efficientzerotensor(ffi.new("int64_t[]", [2]), 1, ffi.NULL,
                                                              ffi.new("int32_t*", 1), ffi.NULL, 0, ffi.NULL, r0),
                      "layout")
