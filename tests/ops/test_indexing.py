"""aoti_torch_mps_index_Tensor, aoti_torch_mps_index_put, aoti_torch_index_put_out, the
scatter fallbacks (aoti_torch_mps_scatter_src_out / _value_out / _reduce_two_out, shim.h's
aoti_torch_scatter_out / _scatter_reduce_out), aoti_torch_mps_index_reduce and
aoti_torch_mps__embedding_bag(_forward_only) against torch eager: None entries, broadcast
index tensors, adjacent and separated indexed dimensions, bool masks, negative and int32
indices, accumulate with duplicates, every reduction with and without include_self, dtypes,
strided views, empty tensors, and bad input (clear errors, out-of-range indices reported at
synchronize). test_compiled_fallbacks.py compiles a model that reaches them."""

import numpy as np
import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, launch_shape, no_leaks_in_module, poisoning_failure  # noqa: F401

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool]


def sample(dtype, shape, seed):
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    low = 0 if dtype == torch.uint8 else -50
    return torch.randint(low, 50, shape, generator=generator, dtype=dtype)


class Keep:
    """Device copies kept alive while a test uses their handles (a handle alone holds none)."""

    def __init__(self):
        self.tensors = []

    def __call__(self, x):
        self.tensors.append(as_device(x))
        return self.tensors[-1].handle


class Indices:
    """An index list for the C shims: device copies kept alive, None entries as NULL."""

    def __init__(self, indices):
        self.devices = [None if i is None else as_device(i) for i in indices]
        self.slots = [ffi.NULL if d is None else ffi.new("AtenTensorHandle*", d.handle) for d in self.devices]
        self.mps = ffi.new("AtenTensorHandle*[]", self.slots) if indices else ffi.NULL
        self.plain = ffi.new("AtenTensorHandle[]", [ffi.NULL if d is None else d.handle for d in self.devices])


def call_index(x, indices):
    r0 = ffi.new("AtenTensorHandle*")
    t, idx = as_device(x), Indices(indices)
    return lib.aoti_torch_mps_index_Tensor(t.handle, idx.mps, len(indices), r0), r0


def result(code, r0):
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch()


def index(x, indices):
    return result(*call_index(x, indices))


def expected_index(x, indices):
    return torch.ops.aten.index.Tensor(x, indices)


PATTERNS = {
    "one": lambda: [torch.tensor([2, 0, -1, 2])],
    "none_then_2d": lambda: [None, torch.tensor([[1, 3], [0, -4]])],
    "broadcast_adjacent": lambda: [None, torch.tensor([[0], [2]]), torch.tensor([1, 4, 0])],
    "separated": lambda: [torch.tensor([1, 0, 2]), None, torch.tensor([4, 4, -5])],
    "int32": lambda: [torch.tensor([2, -1], dtype=torch.int32), torch.tensor([0], dtype=torch.int32)],
    "mask": lambda: [torch.tensor([True, False, True])],
    "mask_2d": lambda: [torch.tensor([[True, False, True, True, False]] * 3) & (torch.arange(3) != 1)[:, None]],
    "mask_and_index": lambda: [torch.tensor([False, True, True]), None, torch.tensor([5, 0])],
    "empty": lambda: [torch.tensor([], dtype=torch.int64)],
}


@pytest.mark.parametrize("pattern", PATTERNS)
def test_index_patterns_match_torch(pattern):
    x = sample(torch.float32, (3, 5, 6), 1)
    indices = PATTERNS[pattern]()
    out = index(x, indices)
    assert torch.equal(out, expected_index(x, indices))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_index_dtypes_and_strided_self(dtype):
    base = sample(dtype, (7, 9, 4), 2)
    view = base.transpose(0, 2)[1:, ::2]                  # strided, offset
    indices = [torch.tensor([0, 2, -1]), torch.tensor([[1], [3]])]
    assert torch.equal(index(view, indices), expected_index(view, indices))
    strided_index = torch.tensor([[0, 9, 1, 9, 2]])[:, ::2]   # an index view with strides
    assert torch.equal(index(view, [None, strided_index]), expected_index(view, [None, strided_index]))


def test_index_errors():
    x = torch.randn(3, 4)
    t = as_device(x)
    poisoning_failure(call_index(x, [torch.tensor([0.5])])[0], "aoti_torch_mps_index_Tensor",
                      "tensors used as indices must be long, int, byte or bool tensors")
    poisoning_failure(call_index(x, [None, None, torch.tensor([0])])[0], "too many indices")
    poisoning_failure(call_index(x, [torch.tensor([True, False])])[0], "The shape of the mask [2]")
    poisoning_failure(call_index(x, [torch.tensor([0, 1]), torch.tensor([0, 1, 2])])[0],
                      "could not be broadcast together with shapes [2], [3]")
    r0 = ffi.new("AtenTensorHandle*")
    poisoning_failure(lib.aoti_torch_mps_index_Tensor(ffi.NULL, ffi.NULL, 0, r0), "null tensor handle")
    poisoning_failure(lib.aoti_torch_mps_index_Tensor(t.handle, ffi.NULL, 1, r0), "indices is null")
    poisoning_failure(lib.aoti_torch_mps_index_Tensor(t.handle, ffi.NULL, 0, ffi.NULL), "ret0 is null")
    # Out of range: the kernel finds it; the next synchronize reports it.
    for bad, message in ((torch.tensor([0, 3]), "index 3 is out of bounds for dimension 0 with size 3"),
                         (torch.tensor([-4]), "index -4 is out of bounds for dimension 0 with size 3")):
        code, r0 = call_index(x, [bad])
        assert code == 0
        Tensor(r0[0]).delete()
        with pytest.raises(etmetal_py.EtmetalError, match=message):
            etmetal_py.synchronize()
    etmetal_py.synchronize()  # the error is cleared


def call_index_put(x, indices, values, accumulate):
    r0 = ffi.new("AtenTensorHandle*")
    t, idx, v = as_device(x), Indices(indices), as_device(values)
    return lib.aoti_torch_mps_index_put(t.handle, idx.mps, len(indices), v.handle, int(accumulate), r0), r0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_matches_torch(dtype, accumulate):
    x = sample(dtype, (6, 5), 3)
    rows = torch.tensor([4, 0, -2, 1]) if not accumulate else torch.tensor([4, 0, 4, -2, 0, 4])  # duplicates
    values = sample(dtype, (rows.numel(), 5), 4)
    out = result(*call_index_put(x, [rows], values, accumulate))
    assert torch.equal(out, torch.index_put(x, (rows,), values, accumulate=accumulate))
    mask = sample(torch.bool, (6, 5), 5)                  # a mask and a broadcast scalar value
    scalar = sample(dtype, (), 6)
    out = result(*call_index_put(x, [mask], scalar, accumulate))
    assert torch.equal(out, torch.index_put(x, (mask,), scalar, accumulate=accumulate))


def test_index_put_broadcast_separated_and_float_accumulation_order():
    x = torch.randn(4, 3, 5)
    indices = [torch.tensor([[0], [3]]), None, torch.tensor([1, 1, 4])]   # separated: result [2, 3, 3]
    values = torch.randn(3, 1)                                              # broadcast over [2, 3, 3]
    for accumulate in (False, True):
        out = result(*call_index_put(x, indices, values, accumulate))
        torch.testing.assert_close(out, torch.ops.aten.index_put(x, indices, values, accumulate), rtol=0, atol=0)
    rows = torch.randint(0, 3, (2000,), generator=torch.Generator().manual_seed(7))
    values = torch.randn(2000, 4)
    out = result(*call_index_put(torch.zeros(3, 4), [rows], values, True))
    torch.testing.assert_close(out, torch.zeros(3, 4).index_put((rows,), values, accumulate=True))


def test_index_put_out_in_place_and_into_another_tensor():
    h = Keep()
    x = torch.randn(5, 4)
    rows, values = torch.tensor([1, 3, 1]), torch.randn(3, 4)
    expected = x.index_put((rows,), values, accumulate=True)
    t, v, idx = as_device(x), as_device(values), Indices([rows])
    etmetal_py.check(lib.aoti_torch_index_put_out(t.handle, t.handle, idx.plain, 1, v.handle, True))
    torch.testing.assert_close(t.torch(), expected)
    out = as_device(torch.zeros(5, 4))
    source = as_device(x.t().contiguous().t())              # self strided, out contiguous
    idx2 = Indices([None, torch.tensor([0, 2])])
    etmetal_py.check(lib.aoti_torch_index_put_out(out.handle, source.handle, idx2.plain, 2,
                                                  h(torch.tensor(9.0)), False))
    assert torch.equal(out.torch(), torch.ops.aten.index_put(x, [None, torch.tensor([0, 2])], torch.tensor(9.0)))


def test_index_put_errors():
    x = torch.randn(3, 4)
    poisoning_failure(call_index_put(x, [torch.tensor([0, 1])], torch.ones(5), False)[0], "aoti_torch_mps_index_put",
                      "value tensor of shape [5] cannot be broadcast to indexing result of shape [2, 4]")
    poisoning_failure(call_index_put(x, [torch.tensor([0])], torch.ones(4).half(), False)[0],
                      "source and destination dtypes match")
    t, v, idx = as_device(x), as_device(torch.ones(4)), Indices([torch.tensor([0])])
    other = as_device(torch.zeros(2, 2))
    poisoning_failure(lib.aoti_torch_index_put_out(other.handle, t.handle, idx.plain, 1, v.handle, False),
                      "aoti_torch_index_put_out", "out must have self's dtype and shape")
    poisoning_failure(lib.aoti_torch_index_put_out(t.handle, t.handle, ffi.NULL, 1, v.handle, False), "indices is null")
    code, r0 = call_index_put(x, [torch.tensor([2, 7])], torch.ones(4), True)
    assert code == 0
    Tensor(r0[0]).delete()
    with pytest.raises(etmetal_py.EtmetalError, match="index 7 is out of bounds for dimension 0 with size 3"):
        etmetal_py.synchronize()


def scatter_reduce_out(x, dim, index_tensor, src, reduce, include_self, shim=lib.aoti_torch_mps_scatter_reduce_two_out):
    h = Keep()
    out = as_device(torch.zeros_like(x))
    code = shim(out.handle, h(x), dim, h(index_tensor), h(src),
                reduce.encode(), int(include_self))
    assert code == 0, etmetal_py.last_error()
    return out.torch()


REDUCTIONS = ["sum", "prod", "mean", "amax", "amin"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scatter_reduce_matches_torch(dtype):
    x = sample(dtype, (4, 6), 8)
    src = sample(dtype, (5, 7), 9)
    index_tensor = torch.randint(0, 6, (4, 7), generator=torch.Generator().manual_seed(10))
    for reduce in REDUCTIONS:
        if reduce == "mean" and dtype == torch.bool:
            continue
        if reduce == "prod" and dtype.is_floating_point:
            src_used = src.float().clamp(-2, 2).to(dtype)
        else:
            src_used = src
        for include_self in (True, False):
            out = scatter_reduce_out(x, 1, index_tensor, src_used, reduce, include_self)
            expected = x.scatter_reduce(1, index_tensor, src_used, reduce, include_self=include_self)
            if dtype in (torch.float16, torch.bfloat16):
                torch.testing.assert_close(out.float(), expected.float(), rtol=2e-2, atol=2e-2)
            else:
                assert torch.equal(out, expected), (reduce, include_self)


def test_scatter_src_value_shim_h_views_nan_and_empty():
    h = Keep()
    x = torch.randn(5, 4).t()                              # strided self
    index_tensor = torch.tensor([[0, 4, 2], [1, 1, 3]])
    src = torch.randn(3, 6)[:, ::2]                         # strided src, larger than index
    for shim in (lib.aoti_torch_mps_scatter_src_out, lib.aoti_torch_scatter_out):
        out = as_device(torch.empty(4, 5))
        etmetal_py.check(shim(out.handle, h(x), -1, h(index_tensor), h(src)))
        assert torch.equal(out.torch(), x.scatter(-1, index_tensor, src))
    out = as_device(torch.empty(4, 5))
    rows = index_tensor % 4
    etmetal_py.check(lib.aoti_torch_mps_scatter_value_out(out.handle, h(x), 0, h(rows), 2.5))
    assert torch.equal(out.torch(), x.scatter(0, rows, 2.5))
    with_nan = torch.tensor([1.0, float("nan"), 3.0])
    for reduce in ("amax", "amin"):
        out = scatter_reduce_out(torch.zeros(2), 0, torch.tensor([0, 0, 1]), with_nan, reduce, True,
                                 shim=lib.aoti_torch_scatter_reduce_out)
        expected = torch.zeros(2).scatter_reduce(0, torch.tensor([0, 0, 1]), with_nan, reduce)
        torch.testing.assert_close(out, expected, rtol=0, atol=0, equal_nan=True)
    empty_index = torch.empty(0, 3, dtype=torch.int64)
    assert torch.equal(scatter_reduce_out(x, 0, empty_index, x, "sum", True), x)
    scalar = torch.tensor(1.5)
    out = scatter_reduce_out(scalar, 0, torch.tensor(0), torch.tensor(2.0), "prod", True)
    assert torch.equal(out, scalar.scatter_reduce(0, torch.tensor(0), torch.tensor(2.0), "prod"))
    in_place = as_device(torch.zeros(3))
    etmetal_py.check(lib.aoti_torch_mps_scatter_reduce_two_out(in_place.handle, in_place.handle, 0,
                                                               h(torch.tensor([2, 2])),
                                                               h(torch.ones(2)), b"sum", 1))
    assert torch.equal(in_place.torch(), torch.tensor([0.0, 0.0, 2.0]))


def test_scatter_errors():
    h = Keep()
    x, index_tensor, src = torch.randn(2, 3), torch.tensor([[0, 1]]), torch.randn(2, 3)
    d = {name: as_device(t) for name, t in (("x", x), ("i", index_tensor), ("src", src))}
    out = as_device(torch.empty(2, 3))

    def reduce_call(index_handle, src_handle, reduce, dim=1):
        return lib.aoti_torch_mps_scatter_reduce_two_out(out.handle, d["x"].handle, dim, index_handle, src_handle,
                                                         reduce, 1)

    poisoning_failure(reduce_call(d["i"].handle, d["src"].handle, b"foo"), "aoti_torch_mps_scatter_reduce_two_out",
                      "reduce argument must be either sum, prod, mean, amax or amin, got foo")
    poisoning_failure(reduce_call(d["i"].handle, d["src"].handle, ffi.NULL), "reduce is null")
    poisoning_failure(reduce_call(h(index_tensor.float()), d["src"].handle, b"sum"),
                      "Expected dtype int64 or int32 for index")
    poisoning_failure(reduce_call(d["i"].handle, h(src.half()), b"sum"),
                      "Expected self.dtype to be equal to src.dtype")
    poisoning_failure(reduce_call(h(torch.tensor([[0, 1, 1, 1]])), d["src"].handle, b"sum"),
                      "Expected index [1, 4] to be no larger than self [2, 3] apart from dimension 1")
    poisoning_failure(reduce_call(h(torch.tensor([0])), d["src"].handle, b"sum"),
                      "same number of dimensions as self")
    poisoning_failure(reduce_call(d["i"].handle, d["src"].handle, b"sum", dim=2), "dim 2 is out of range")
    poisoning_failure(reduce_call(ffi.NULL, d["src"].handle, b"sum"), "null tensor handle")
    poisoning_failure(lib.aoti_torch_scatter_out(h(torch.empty(3, 3)), d["x"].handle, 1,
                                                 d["i"].handle, d["src"].handle), "aoti_torch_scatter_out",
                      "must have self's dtype and shape")
    bool_x = as_device(torch.ones(3, dtype=torch.bool))
    poisoning_failure(lib.aoti_torch_mps_scatter_reduce_two_out(bool_x.handle, bool_x.handle, 0,
                                                                h(torch.tensor([0])),
                                                                bool_x.handle, b"mean", 1), "'mean' is not supported")
    code = lib.aoti_torch_mps_scatter_src_out(out.handle, d["x"].handle, 1, h(torch.tensor([[0, 5]])),
                                              d["src"].handle)
    assert code == 0
    with pytest.raises(etmetal_py.EtmetalError, match="index 5 is out of bounds for dimension 1 with size 3"):
        etmetal_py.synchronize()


# From 64 index positions on (per line for scatter; with fewer than 16 K lines), the GPU shape
# sorts the indices and gives each run of equal ones to one thread; the CPU shape walks them.
# Both must give the in-order results bitwise. The dtype sweeps run the GPU shape (the CPU
# shape's kernels are swept above); test_sorted_forms_match_the_in_order_walk_bitwise runs both.
@pytest.fixture
def gpu_shape(monkeypatch):
    monkeypatch.setenv("ETMETAL_OP_SHAPES", "gpu")


def long_index_put_cases(dtype):
    g = torch.Generator().manual_seed(40)
    x = sample(dtype, (9, 7, 3), 41).transpose(0, 1)                      # strided self [7, 9, 3]
    rows = torch.randint(-7, 7, (300,), generator=g)                      # duplicates, negatives
    values = sample(dtype, (3, 300, 9), 42).permute(1, 2, 0)              # strided values [300, 9, 3]
    yield x, [rows], values
    separated = [torch.randint(0, 7, (20, 1), generator=g), None,
                 torch.randint(-3, 3, (15,), generator=g, dtype=torch.int32)]   # result [20, 15, 9]
    yield x, separated, sample(dtype, (15, 9), 43)                        # values broadcast
    yield sample(dtype, (50,), 44), [torch.randint(-50, 50, (2000,), generator=g)], sample(dtype, (2000,), 45)
    yield x, [torch.tensor([], dtype=torch.int64)], sample(dtype, (0, 9, 3), 46)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_index_put_accumulate_of_many_positions_matches_torch(dtype, gpu_shape):
    for x, indices, values in long_index_put_cases(dtype):
        out = result(*call_index_put(x, indices, values, True))
        assert torch.equal(out, torch.ops.aten.index_put(x, indices, values, True)), values.shape


def long_scatter_cases(dtype):
    g = torch.Generator().manual_seed(50)
    x = sample(dtype, (6, 40), 51)
    src = sample(dtype, (150, 8), 52).t()                                  # strided src [8, 150]
    yield x, 1, torch.randint(0, 40, (6, 150), generator=g), src           # lines of 150, duplicates
    index_t = torch.randint(0, 6, (40, 100), generator=g, dtype=torch.int32).t()  # strided int32 [100, 40]
    yield x, 0, index_t, sample(dtype, (100, 40), 53)
    yield x, 1, torch.empty(6, 0, dtype=torch.int64), src


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scatter_of_long_lines_matches_torch(dtype, gpu_shape):
    for x, dim, index_tensor, src in long_scatter_cases(dtype):
        for reduce in REDUCTIONS:
            if reduce == "mean" and dtype == torch.bool:
                continue
            used = src.float().clamp(0.9, 1.1).to(dtype) if reduce == "prod" and dtype.is_floating_point else src
            for include_self in (True, False):
                out = scatter_reduce_out(x, dim, index_tensor, used, reduce, include_self)
                expected = x.scatter_reduce(dim, index_tensor, used, reduce, include_self=include_self)
                if dtype in (torch.float16, torch.bfloat16) and reduce in ("sum", "mean", "prod"):
                    # torch sums in float and rounds once; ours rounds each step (see the bitwise test).
                    torch.testing.assert_close(out.float(), expected.float(), rtol=5e-2, atol=5e-2)
                else:
                    assert torch.equal(out, expected), (dim, reduce, include_self)
        h, out = Keep(), as_device(torch.empty_like(x))
        etmetal_py.check(lib.aoti_torch_mps_scatter_src_out(out.handle, h(x), dim, h(index_tensor), h(src)))
        assert torch.equal(out.torch(), x.scatter(dim, index_tensor, src))   # duplicates: the last one wins
        etmetal_py.check(lib.aoti_torch_mps_scatter_value_out(out.handle, h(x), dim, h(index_tensor), 3.0))
        assert torch.equal(out.torch(), x.scatter(dim, index_tensor, 3.0))
    if dtype in (torch.float32, torch.int64, torch.int32):
        index_tensor = torch.randint(0, 6, (90,), generator=torch.Generator().manual_seed(54))
        source = sample(dtype, (40, 90), 55)
        for reduce in ("prod", "mean", "amax", "amin"):
            for include_self in (True, False):
                out = result(*call_index_reduce(x, 0, index_tensor, source.t(), reduce, include_self))
                assert torch.equal(out, x.index_reduce(0, index_tensor, source.t(), reduce, include_self=include_self))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_sorted_forms_match_the_in_order_walk_bitwise(dtype, monkeypatch):
    g = torch.Generator().manual_seed(60)
    x, values = sample(dtype, (40, 3), 61), sample(dtype, (3000, 3), 62)
    rows = torch.randint(0, 40, (3000,), generator=g)
    index_tensor = torch.randint(0, 40, (3000, 3), generator=g)
    outputs = {}
    for shape in ("gpu", "cpu"):
        monkeypatch.setenv("ETMETAL_OP_SHAPES", shape)
        outputs[shape] = [result(*call_index_put(x, [rows], values, True))]
        outputs[shape] += [scatter_reduce_out(x, 0, index_tensor, values, reduce, include_self)
                           for reduce in ("sum", "mean") for include_self in (True, False)]
    for sorted_form, walk in zip(outputs["gpu"], outputs["cpu"]):
        assert torch.equal(sorted_form, walk)
    if dtype == torch.float32:   # torch's CPU kernels add in index order too
        assert torch.equal(outputs["gpu"][0], x.index_put((rows,), values, accumulate=True))
        assert torch.equal(outputs["gpu"][1], x.scatter_reduce(0, index_tensor, values, "sum"))


def in_order_sums(x, positions, values):
    """x[positions[i]] += values[i] for i in order (rows of x when it has more dimensions),
    rounding each sum to float32."""
    sums = x.numpy().copy()
    for position, value in zip(positions.tolist(), values.numpy()):
        sums[position] = sums[position] + value   # float32 + float32: rounded to float32
    return torch.from_numpy(sums)


def test_sorted_forms_of_multi_pass_sorts(launch_shape):
    """Sorts of several blocks of 2048 keys and several radix passes (keys below 2^17: three
    passes; below 2^14 and 2^9: two), in one line and in several, against in-order sums."""
    g = torch.Generator().manual_seed(80)
    x, values = torch.randn(70000, generator=g), torch.randn(5000, generator=g)
    rows = torch.randint(-300, 300, (5000,), generator=g) * 233              # duplicates, far apart
    out = result(*call_index_put(x, [rows], values, True))
    assert torch.equal(out, in_order_sums(x, rows % x.numel(), values))
    x, values = torch.randn(3000, 5, generator=g), torch.randn(4500, 5, generator=g)
    rows = torch.randint(0, 3000, (4500,), generator=g)
    assert torch.equal(result(*call_index_put(x, [rows], values, True)), in_order_sums(x, rows, values))

    x = torch.randn(400, 3, generator=g)
    index_tensor = torch.randint(0, 400, (3, 5000), generator=g).t()         # strided, lines along dim 0
    src = torch.randn(5000, 3, generator=g)
    out = scatter_reduce_out(x, 0, index_tensor, src, "sum", True)
    expected = torch.stack([in_order_sums(x[:, c], index_tensor[:, c], src[:, c]) for c in range(3)], 1)
    assert torch.equal(out, expected)
    for reduce in ("mean", "amax", "prod"):
        expected = x.scatter_reduce(0, index_tensor, src, reduce, include_self=False)
        out = scatter_reduce_out(x, 0, index_tensor, src, reduce, False)
        torch.testing.assert_close(out, expected, rtol=0 if reduce == "amax" else 1e-5, atol=0), reduce
    index_tensor = torch.randint(0, 3, (40, 4100), generator=g, dtype=torch.int32)[:, ::2]   # int32, strided
    src = torch.randn(40, 2050, generator=g)
    x = torch.randn(40, 3, generator=g)
    expected = torch.stack([in_order_sums(x[r], index_tensor[r], src[r]) for r in range(40)])
    assert torch.equal(scatter_reduce_out(x, 1, index_tensor, src, "sum", True), expected)


@pytest.mark.slow
def test_sorted_forms_at_report_sizes(monkeypatch):
    """kernel_report's sizes: 64 K positions into 4 K elements (multi-pass sorts), against
    in-order sums (torch's index_put no longer adds in order at this size)."""
    monkeypatch.setenv("ETMETAL_OP_SHAPES", "gpu")
    g = torch.Generator().manual_seed(70)
    x, values = torch.randn(1 << 16, generator=g), torch.randn(1 << 16, generator=g)
    rows = torch.randint(-4096, 4096, (1 << 16,), generator=g)
    expected = in_order_sums(x, rows % x.numel(), values)
    assert torch.equal(result(*call_index_put(x, [rows], values, True)), expected)
    index_tensor = rows.abs()
    out = scatter_reduce_out(x, 0, index_tensor, values, "sum", True)
    assert torch.equal(out, in_order_sums(x, index_tensor, values))
    for reduce in ("mean", "amax"):
        expected = x.scatter_reduce(0, index_tensor, values, reduce)
        assert torch.equal(scatter_reduce_out(x, 0, index_tensor, values, reduce, True), expected), reduce


def test_out_of_range_in_long_index(launch_shape):
    x = torch.zeros(5, 4)
    rows = torch.arange(100) % 5
    rows[70] = 9
    code, r0 = call_index_put(x, [rows], torch.ones(100, 4), True)
    assert code == 0
    Tensor(r0[0]).delete()
    with pytest.raises(etmetal_py.EtmetalError, match="index 9 is out of bounds for dimension 0 with size 5"):
        etmetal_py.synchronize()
    for index_dtype in (torch.int64, torch.int32):
        index_tensor = (torch.arange(100) % 4).to(index_dtype).expand(5, 100)
        index_tensor = index_tensor.clone()
        index_tensor[3, 80] = -1
        h, out = Keep(), as_device(torch.empty(5, 4))
        assert lib.aoti_torch_mps_scatter_reduce_two_out(out.handle, h(x), 1, h(index_tensor), h(torch.ones(5, 100)),
                                                         b"sum", 1) == 0
        with pytest.raises(etmetal_py.EtmetalError, match="index -1 is out of bounds for dimension 1 with size 4"):
            etmetal_py.synchronize()


def call_index_reduce(x, dim, index_tensor, source, reduce, include_self=True):
    h = Keep()
    r0 = ffi.new("AtenTensorHandle*")
    code = lib.aoti_torch_mps_index_reduce(h(x), dim, h(index_tensor), h(source), reduce.encode(), int(include_self), r0)
    return code, r0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int32], ids=str)
def test_index_reduce_matches_torch(dtype):
    x = sample(dtype, (5, 7), 30)
    source = sample(dtype, (5, 9), 31).t()                   # strided, [9, 5]
    index_tensor = torch.tensor([4, 0, 4, 2, 6, 0, 0, 1, 4])
    for reduce in ("prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            out = result(*call_index_reduce(x.t(), 0, index_tensor.int(), source, reduce, include_self))
            expected = x.t().index_reduce(0, index_tensor, source, reduce, include_self=include_self)
            if dtype == torch.float16:
                torch.testing.assert_close(out, expected, rtol=2e-3, atol=1e-2)
            else:
                assert torch.equal(out, expected), (reduce, include_self)


def test_index_reduce_errors():
    x, source = torch.randn(3, 4), torch.ones(3, 2)
    poisoning_failure(call_index_reduce(x, 1, torch.tensor([0, 0]), source, "sum")[0], "aoti_torch_mps_index_reduce",
                      "Expected reduce to be one of prod, mean, amax or amin")
    poisoning_failure(call_index_reduce(x, 1, torch.tensor([[0, 0]]), source, "prod")[0],
                      "Index is supposed to be a vector")
    poisoning_failure(call_index_reduce(x, 1, torch.tensor([0, 0, 1]), source, "prod")[0],
                      "Number of indices (3) should be equal to source.size(dim): (2)")
    poisoning_failure(call_index_reduce(x, 1, torch.tensor([0, 1]), torch.ones(2, 2), "prod")[0],
                      "must match apart from dimension 1")
    code, r0 = call_index_reduce(x, 1, torch.tensor([0, 7]), source, "prod")
    assert code == 0
    Tensor(r0[0]).delete()
    with pytest.raises(etmetal_py.EtmetalError, match="index 7 is out of bounds for dimension 1 with size 4"):
        etmetal_py.synchronize()

def call_embedding_bag(weight, indices, offsets, mode, per_sample_weights=None, include_last_offset=False,
                       padding_idx=-1, shim=lib.aoti_torch_mps__embedding_bag):
    h = Keep()
    rets = [ffi.new("AtenTensorHandle*") for _ in range(4)]
    weights_arg = ffi.new("AtenTensorHandle*", h(per_sample_weights)) if per_sample_weights is not None else ffi.NULL
    code = shim(h(weight), h(indices), h(offsets), 0, mode, 0, weights_arg, int(include_last_offset), padding_idx,
                *rets)
    return code, rets


def embedding_bag(*args, **kwargs):
    code, rets = call_embedding_bag(*args, **kwargs)
    assert code == 0, etmetal_py.last_error()
    return [Tensor(r[0]).torch() for r in rets]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mode", [0, 1, 2], ids=["sum", "mean", "max"])
def test_embedding_bag_matches_torch(dtype, mode, launch_shape):
    weight = sample(dtype, (12, 6), 20)
    indices = torch.randint(0, 12, (15,), generator=torch.Generator().manual_seed(21))
    indices[3] = 4                                        # padding_idx 4 appears
    offsets = torch.tensor([0, 5, 5, 11])                  # an empty bag
    for padding_idx in (-1, 4):
        for include_last_offset, bag_offsets in ((False, offsets), (True, torch.cat([offsets, torch.tensor([15])]))):
            out, offset2bag, bag_size, max_indices = embedding_bag(weight, indices, bag_offsets, mode,
                                                                   include_last_offset=include_last_offset,
                                                                   padding_idx=padding_idx)
            expected = torch.ops.aten._embedding_bag(weight, indices, bag_offsets, False, mode, False, None,
                                                     include_last_offset, padding_idx)
            tolerance = 1e-6 if dtype == torch.float32 else 1e-2
            torch.testing.assert_close(out.float(), expected[0].float(), rtol=tolerance, atol=tolerance)
            assert torch.equal(offset2bag, torch.tensor([0] * 5 + [2] * 6 + [3] * 4))
            assert bag_size.shape == bag_offsets.shape
            if mode != 0:                                  # torch's CPU kernel counts only for mean / max
                assert torch.equal(bag_size[:4], expected[2][:4])
            if mode == 2:
                filled = torch.tensor([True, False, True, True])
                assert torch.equal(max_indices[filled], expected[3][filled])
                assert torch.equal(max_indices[1], torch.full((6,), -1))


# Long bags (the GPU shape splits each over eight simdgroups, in chunks of 256 entries; the
# features in blocks of 32 with a tail), an empty bag, padding entries and per-sample weights,
# int32 and int64 indices; max against torch, with ties between equal rows of weight (the first
# occurrence wins) and NaNs, which torch's and the in-order (CPU shape) kernel's rule decide:
# a NaN first element is the bag's result, later NaNs are passed over.
@pytest.mark.parametrize("mode", [0, 1, 2], ids=["sum", "mean", "max"])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
def test_embedding_bag_long_bags(mode, index_dtype, launch_shape):
    generator = torch.Generator().manual_seed(31)
    weight = torch.randn(50, 70, generator=generator)
    weight[7] = weight[3]                                  # ties between rows 3 and 7
    indices = torch.randint(0, 50, (3000,), generator=generator, dtype=index_dtype)
    indices[1400:1500] = 3
    indices[1600:1700] = 7
    indices[::97] = 5                                      # padding_idx 5
    offsets = torch.tensor([0, 1, 1, 1300, 2999], dtype=index_dtype)
    scale = torch.rand(3000, generator=generator) if mode == 0 else None
    for padding_idx in (-1, 5):
        out, offset2bag, bag_size, max_indices = embedding_bag(weight, indices, offsets, mode,
                                                               per_sample_weights=scale, padding_idx=padding_idx)
        expected = torch.ops.aten._embedding_bag(weight, indices, offsets, False, mode, False, scale, False,
                                                 padding_idx)
        torch.testing.assert_close(out, expected[0], rtol=1e-5, atol=1e-4)
        bag_of_entry = torch.repeat_interleave(torch.arange(5), torch.tensor([1, 0, 1299, 1699, 1]))
        assert torch.equal(offset2bag, bag_of_entry.to(index_dtype))
        if mode != 0:
            assert torch.equal(bag_size, expected[2])
        if mode == 2:                                      # bags with nothing counted: -1 (torch: 0)
            filled = bag_size > 0
            assert torch.equal(max_indices[filled], expected[3][filled])
            assert torch.equal(max_indices[~filled], torch.full_like(max_indices[~filled], -1))
    if mode == 2:
        with_nans = weight.clone()
        with_nans[indices[1300], :10] = float("nan")       # the first element of bag 3
        with_nans[indices[2000], 20:30] = float("nan")     # later elements of bag 3
        out, _, bag_size, max_indices = embedding_bag(with_nans, indices, offsets, mode)
        expected = torch.ops.aten._embedding_bag(with_nans, indices, offsets, False, mode, False, None, False, -1)
        torch.testing.assert_close(out, expected[0], equal_nan=True)
        filled = bag_size > 0
        assert torch.equal(max_indices[filled], expected[3][filled])


def test_embedding_bag_weights_int32_strided_and_bad_input(launch_shape):
    weight = torch.randn(6, 10).t()                        # [10, 6], strided
    indices = torch.tensor([1, 9, 3, 3, 0], dtype=torch.int32)
    offsets = torch.tensor([0, 2], dtype=torch.int32)
    scale = torch.randn(5)
    out, offset2bag, _, _ = embedding_bag(weight, indices, offsets, 0, per_sample_weights=scale,
                                          shim=lib.aoti_torch_mps__embedding_bag_forward_only)
    expected = torch.nn.functional.embedding_bag(indices, weight, offsets, mode="sum", per_sample_weights=scale)
    torch.testing.assert_close(out, expected)
    assert offset2bag.dtype == torch.int32
    poisoning_failure(call_embedding_bag(weight, indices, offsets, 1, per_sample_weights=scale)[0],
                      "aoti_torch_mps__embedding_bag", "per_sample_weights only supported with mode='sum'")
    poisoning_failure(call_embedding_bag(weight, indices.float(), offsets, 0)[0], "expected indices to be long or int")
    poisoning_failure(call_embedding_bag(weight.long(), indices, offsets, 0)[0], "expected weight to be floating point")
    poisoning_failure(call_embedding_bag(weight, indices, offsets, 3)[0], "mode has to be 0 (sum), 1 (mean) or 2")
    poisoning_failure(call_embedding_bag(weight, indices, torch.empty(0, dtype=torch.int64), 0,
                                         include_last_offset=True)[0], "numBags should be at least 1")
    code, rets = call_embedding_bag(weight, torch.tensor([1, 10]), offsets, 2)
    assert code == 0
    for r in rets:
        Tensor(r[0]).delete()
    with pytest.raises(etmetal_py.EtmetalError, match="index 10 is out of range for a weight of 10 rows"):
        etmetal_py.synchronize()
