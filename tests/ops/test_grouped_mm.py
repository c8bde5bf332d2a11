"""aoti_torch_mps__grouped_mm against torch._grouped_mm (CPU eager): the four layouts (groups of
rows, of columns, of the depth, batches), float32 / float16 / bfloat16, transposed (strided)
operands as MoE experts pass them, empty groups, rows past the last end, and bad input.
test_compiled_fallbacks.py compiles a mixture-of-experts block that reaches it."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, assert_close_scaled, no_leaks_in_module, poisoning_failure  # noqa: F401

TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def call(a, b, offs=None, bias=None, out_dtype=None):
    kept = [as_device(a), as_device(b)] + [as_device(t) for t in (offs, bias) if t is not None]
    offs_arg = ffi.new("AtenTensorHandle*", kept[2].handle) if offs is not None else ffi.NULL
    bias_arg = ffi.new("AtenTensorHandle*", kept[-1].handle) if bias is not None else ffi.NULL
    dtype_arg = ffi.new("int32_t*", out_dtype) if out_dtype is not None else ffi.NULL
    r0 = ffi.new("AtenTensorHandle*")
    return lib.aoti_torch_mps__grouped_mm(kept[0].handle, kept[1].handle, offs_arg, bias_arg, dtype_arg, r0), r0


def grouped_mm(a, b, offs=None):
    code, r0 = call(a, b, offs)
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch()


def offsets(*ends):
    return torch.tensor(ends, dtype=torch.int32)


def randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_layouts_match_torch(dtype):
    tolerance = TOLERANCE[dtype]
    a, experts = randn(10, 16, dtype=dtype, seed=1), randn(3, 24, 16, dtype=dtype, seed=2)
    b = experts.transpose(-2, -1)                          # [G, K, N], strided as MoE passes it
    ends = offsets(2, 2, 9)                                # an empty group; row 9 past the last end
    out = grouped_mm(a, b, ends)
    assert out.dtype == dtype and out.shape == (10, 24)
    assert_close_scaled(out[:9], torch._grouped_mm(a, b, offs=ends)[:9], tolerance)
    assert torch.equal(out[9], torch.zeros(24, dtype=dtype))
    a3, b2 = randn(3, 8, 16, dtype=dtype, seed=3), randn(16, 32, dtype=dtype, seed=4)
    column_ends = offsets(8, 24, 32)
    assert_close_scaled(grouped_mm(a3, b2, column_ends), torch._grouped_mm(a3, b2, offs=column_ends), tolerance)
    a2, b_depth = randn(16, 12, dtype=dtype, seed=5).t().contiguous().t(), randn(12, 16, dtype=dtype, seed=6)
    depth_ends = offsets(3, 3, 12)
    out = grouped_mm(a2, b_depth, depth_ends)
    assert out.shape == (3, 16, 16) and torch.equal(out[1], torch.zeros(16, 16, dtype=dtype))
    assert_close_scaled(out, torch._grouped_mm(a2, b_depth, offs=depth_ends), tolerance)
    assert_close_scaled(grouped_mm(a3, b), torch._grouped_mm(a3, b.contiguous()), tolerance)


def test_empty_operands():
    assert grouped_mm(torch.empty(0, 16), randn(2, 16, 8), offsets(0, 0)).shape == (0, 8)
    out = grouped_mm(torch.empty(4, 0), torch.empty(0, 8), offsets(0, 0))
    assert torch.equal(out, torch.zeros(2, 4, 8))


def test_bad_input():
    a, b, ends = randn(4, 8), randn(2, 8, 8), offsets(2, 4)
    poisoning_failure(call(a.int(), b.int(), ends)[0], "aoti_torch_mps__grouped_mm", "Float32, BFloat16 or Float16")
    poisoning_failure(call(a, b.half(), ends)[0], "same dtype")
    poisoning_failure(call(a, b, ends.long())[0], "Offsets have to be int32")
    poisoning_failure(call(a, b)[0], "Have to provide offsets")
    poisoning_failure(call(randn(2, 4, 8), b, ends)[0], "Have to provide offsets")
    poisoning_failure(call(a, randn(2, 4, 8), ends)[0], "contraction dimension")
    poisoning_failure(call(a, b, offsets(4))[0], "matrix batch sizes have to match")
    poisoning_failure(call(a, b, ends, bias=randn(2, 8))[0], "Bias not supported yet")
    poisoning_failure(call(a, b, ends, out_dtype=15)[0], "output dtype must match")
    r0 = ffi.new("AtenTensorHandle*")
    poisoning_failure(lib.aoti_torch_mps__grouped_mm(ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL, r0),
                      "null tensor handle")


def spans(ends, extent):
    """Each group's [begin, end) as the kernel assigns rows (columns, depth) to groups."""
    begin, result = 0, []
    for end in ends:
        end = min(max(end, begin), extent)
        result.append((begin, end))
        begin = end
    return result


@pytest.mark.parametrize("ends", [(10, 10, 100, 140), (60, 20, 130, 140)], ids=["sorted", "unsorted"])
def test_blocks_match_float64(ends):
    """Groups that start and end inside the kernel's 64 x 64 blocks, several column and depth
    blocks with partial ends, an empty group, the tail past the last end, ends that decrease;
    every layout, against float64 products group by group."""
    tolerance = 1e-5
    a, experts = randn(150, 40, seed=7), randn(4, 70, 40, seed=8)
    b = experts.transpose(-2, -1)  # [G, K, N], strided
    expected = torch.zeros(150, 70, dtype=torch.float64)
    for g, (begin, end) in enumerate(spans(ends, 150)):
        expected[begin:end] = a[begin:end].double() @ b[g].double()
    out = grouped_mm(a, b, offsets(*ends))
    assert_close_scaled(out, expected, tolerance)
    assert torch.equal(out[140:], torch.zeros(10, 70))
    half = grouped_mm(a.half(), b.half(), offsets(*ends))  # the same blocks in float16
    assert half.dtype == torch.float16
    assert_close_scaled(half, expected, TOLERANCE[torch.float16])

    a3, b2 = randn(4, 70, 40, seed=9), randn(150, 40, seed=10).t()  # b [K, N] column-major
    expected = torch.zeros(70, 150, dtype=torch.float64)
    for g, (begin, end) in enumerate(spans(ends, 150)):
        expected[:, begin:end] = a3[g].double() @ b2[:, begin:end].double()
    out = grouped_mm(a3, b2, offsets(*ends))
    assert_close_scaled(out, expected, tolerance)
    assert torch.equal(out[:, 140:], torch.zeros(70, 10))

    a2, b_depth = randn(100, 70, seed=11).t(), randn(100, 66, seed=12)  # depth 100
    depth_ends = (30, 30, 90)
    expected = torch.stack([a2[:, begin:end].double() @ b_depth[begin:end].double()
                            for begin, end in spans(depth_ends, 100)])
    assert_close_scaled(grouped_mm(a2, b_depth, offsets(*depth_ends)), expected, tolerance)

    batch_a = randn(2, 75, 45, seed=13)[:, 5:, 5:]  # offset view [2, 70, 40]
    batch_b = randn(2, 40, 66, seed=14)
    assert_close_scaled(grouped_mm(batch_a, batch_b), batch_a.double() @ batch_b.double(), tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_wide_blocks_match_float64(dtype):
    """Outputs at least 128 wide along their wider, ungrouped dimension take blocks of 64 x 128
    (or 128 x 64): whole and partial wide blocks in every layout that has them, against float64
    products group by group."""
    tolerance = TOLERANCE[dtype]

    def check(out, expected):
        assert out.dtype == dtype
        assert_close_scaled(out, expected, tolerance)

    ends = (30, 30, 90)  # an empty group, the tail past the last end
    a, experts = randn(100, 40, dtype=dtype, seed=15), randn(3, 200, 40, dtype=dtype, seed=16)
    b = experts.transpose(-2, -1)  # [G, K, N] strided; rows grouped, 200 columns: 64 x 128 blocks
    expected = torch.zeros(100, 200, dtype=torch.float64)
    for g, (begin, end) in enumerate(spans(ends, 100)):
        expected[begin:end] = a[begin:end].double() @ b[g].double()
    check(grouped_mm(a, b, offsets(*ends)), expected)

    a3, b2 = randn(3, 150, 40, dtype=dtype, seed=17), randn(40, 90, dtype=dtype, seed=18)  # 150 rows: 128 x 64
    expected = torch.zeros(150, 90, dtype=torch.float64)
    for g, (begin, end) in enumerate(spans((20, 20, 70), 90)):
        expected[:, begin:end] = a3[g].double() @ b2[:, begin:end].double()
    check(grouped_mm(a3, b2, offsets(20, 20, 70)), expected)

    for rows, columns in ((70, 300), (200, 130)):  # depth groups: 64 x 128, then 128 x 64
        a2, b_depth = randn(rows, 100, dtype=dtype, seed=rows), randn(100, columns, dtype=dtype, seed=columns)
        expected = torch.stack([a2[:, begin:end].double() @ b_depth[begin:end].double()
                                for begin, end in spans(ends, 100)])
        check(grouped_mm(a2, b_depth, offsets(*ends)), expected)

    for rows, columns in ((70, 150), (140, 66)):  # batches: 64 x 128, then 128 x 64
        batch_a, batch_b = randn(2, rows, 40, dtype=dtype, seed=19), randn(2, 40, columns, dtype=dtype, seed=20)
        check(grouped_mm(batch_a, batch_b), batch_a.double() @ batch_b.double())
