#!/usr/bin/env python3
"""Kernel shape report: for each op at representative shapes, the device-memory bytes its
kernels read and write (exact, from the CPU device's traffic counters, ETMETAL_COUNTERS=1)
against the op's minimum (every input read once, every output written once), and the threads
and threadgroups it launches. With --time, the median wall time of each op on the CPU device
instead, with the process's CPU seconds per run (user + system: steadier than wall time on a
shared machine), in an uninstrumented process (counting slows kernels down).

Launch shapes (ETMETAL_OP_SHAPES): ops whose best shape differs by device (cumulative ops and
adaptive pooling of long lines / large windows, embedding_bag, products with fewer than 16 rows,
topk's group size, index_put accumulate and scatter with long runs of index positions) are counted in the GPU
shape, the one Metal runs, unless ETMETAL_OP_SHAPES says otherwise: the bytes and threads are
the GPU's figures even though the CPU device counts them. --time times the device's own shape
(the CPU device's: one thread per line); --time --compare-shapes times both, interleaved, and
their ratio.

usage: python3 tools/kernel_report.py [--only SUBSTRING] [--time [--compare-shapes]] [--repeats N]
"""

import argparse
import os
import statistics
import sys
import time

TIMING = "--time" in sys.argv
if not TIMING:
    os.environ["ETMETAL_COUNTERS"] = "1"  # before the library loads: it selects how kernels compile
    os.environ.setdefault("ETMETAL_OP_SHAPES", "gpu")  # the bytes and threads Metal's shapes have
elif os.environ.get("ETMETAL_COUNTERS") == "1":
    sys.exit("--time measures uninstrumented kernels: unset ETMETAL_COUNTERS")
os.environ.setdefault("ETMETAL_DEVICE", "cpu")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

import etmetal_py  # noqa: E402
from etmetal_py import Tensor, ffi, lib  # noqa: E402
from etmetal_py.ops import quantize  # noqa: E402


def device(x):
    return Tensor.from_array(x.contiguous())


def nbytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def returned(count):
    return [ffi.new("AtenTensorHandle*") for _ in range(count)]


def sdpa_case(batch, heads, kv_heads, rows, keys, dim, dtype, causal):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, rows, dim, generator=g).to(dtype)
    k = torch.randn(batch, kv_heads, keys, dim, generator=g).to(dtype)
    v = torch.randn(batch, kv_heads, keys, dim, generator=g).to(dtype)
    dq, dk, dv = device(q), device(k), device(v)
    itemsize = q.element_size()
    minimum = nbytes(q, k, v) + batch * heads * rows * (dim + keys) * itemsize  # + output + weights

    def run():
        r0, r1 = returned(2)
        etmetal_py.check(lib.aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2(
            dq.handle, dk.handle, dv.handle, ffi.NULL, 0.0, int(causal), ffi.NULL, ffi.NULL, 1, r0, r1))
        return [Tensor(r0[0]), Tensor(r1[0])]

    return run, minimum


def rms_norm_case(rows, width, dtype):
    x = torch.randn(rows, width).to(dtype)
    w = torch.randn(width).to(dtype)
    dx, dw = device(x), device(w)
    minimum = nbytes(x, w) + nbytes(x) + rows * 4  # input, weight; output, float32 rstd

    def run():
        r0, r1 = returned(2)
        etmetal_py.check(lib.aoti_torch_mps__fused_rms_norm(
            dx.handle, ffi.new("int64_t[]", [width]), 1, ffi.new("AtenTensorHandle*", dw.handle),
            ffi.new("double*", 1e-6), r0, r1))
        return [Tensor(r0[0]), Tensor(r1[0])]

    return run, minimum


def histc_case(numel, bins, low, high, dtype):
    x = torch.randn(numel).to(dtype)
    dx = device(x)
    minimum = nbytes(x) + bins * x.element_size()

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch_mps_histc(dx.handle, bins, low, high, r0))
        return [Tensor(r0[0])]

    return run, minimum


def histogram_case(numel, bins):
    x = torch.randn(numel)
    dx = device(x)
    minimum = nbytes(x) + (2 * bins + 1) * x.element_size()  # hist and edges

    def run():
        r0, r1 = returned(2)
        etmetal_py.check(lib.aoti_torch_mps_histogram_bin_ct(dx.handle, bins, ffi.NULL, 0, ffi.NULL, 0, r0, r1))
        return [Tensor(r0[0]), Tensor(r1[0])]

    return run, minimum


def nonzero_case(shape, density, dtype):
    g = torch.Generator().manual_seed(0)
    x = ((torch.rand(shape, generator=g) < density) * torch.randn(shape, generator=g).add(3)).to(dtype)
    dx = device(x)
    minimum = nbytes(x) + torch.count_nonzero(x).item() * len(shape) * 8  # int64 indices

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch_mps_nonzero(dx.handle, r0))
        return [Tensor(r0[0])]

    return run, minimum


def masked_select_case(shape, density, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(dtype)
    mask = torch.rand(shape, generator=g) < density
    dx, dm = device(x), device(mask)
    minimum = nbytes(mask) + 2 * int(mask.sum()) * x.element_size()  # the selected elements read and written

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch_mps_masked_select(dx.handle, dm.handle, r0))
        return [Tensor(r0[0])]

    return run, minimum


def mm_case(m, k, n, dtype, weight_transposed=False):
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(n, k).to(dtype) if weight_transposed else torch.randn(k, n).to(dtype)
    da, weight = device(a), device(b)
    db = weight
    if weight_transposed:  # x @ weight.t(), as nn.Linear
        view = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch__reinterpret_tensor(weight.handle, 2, ffi.new("int64_t[]", [k, n]),
                                                            ffi.new("int64_t[]", [1, k]), 0, view))
        db = Tensor(view[0])
    out = device(torch.empty(m, n, dtype=dtype))
    minimum = nbytes(a, b) + m * n * a.element_size()

    def run():
        etmetal_py.check(lib.aoti_torch_mps_mm_out(out.handle, da.handle, db.handle))
        return [weight]  # keeps the weight's storage alive with the view

    return run, minimum


def channels_last_view(x):
    """The values of the NCHW tensor x in an NHWC device buffer, seen as NCHW."""
    batch, channels, height, width = x.shape
    storage = device(x.permute(0, 2, 3, 1))
    view = ffi.new("AtenTensorHandle*")
    etmetal_py.check(lib.aoti_torch__reinterpret_tensor(
        storage.handle, 4, ffi.new("int64_t[]", list(x.shape)),
        ffi.new("int64_t[]", [height * width * channels, 1, width * channels, channels]), 0, view))
    return Tensor(view[0], keepalive=storage)


def conv_case(batch, cin, cout, size, kernel, stride, groups, dtype, channels_last=False):
    x = torch.randn(batch, cin, size, size).to(dtype)
    w = torch.randn(cout, cin // groups, kernel, kernel).to(dtype)
    dx, dw = device(x), device(w)
    if channels_last:
        dx = channels_last_view(x)
    pad = kernel // 2
    out_size = (size + 2 * pad - kernel) // stride + 1
    minimum = nbytes(x, w) + batch * cout * out_size * out_size * x.element_size()

    def ints(values):
        return ffi.new("int64_t[]", values), len(values)

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch_mps_convolution(
            dx.handle, dw.handle, ffi.NULL, *ints([stride, stride]), *ints([pad, pad]), *ints([1, 1]), 0,
            *ints([0, 0]), groups, r0))
        return [Tensor(r0[0])]

    return run, minimum


def conv_transpose_case(batch, cin, cout, size, kernel, stride, padding, output_padding, dilation, groups,
                        dtype, spatial=2, channels_last=False):
    x = torch.randn(batch, cin, *[size] * spatial).to(dtype)
    w = torch.randn(cin, cout // groups, *[kernel] * spatial).to(dtype)
    dx, dw = device(x), device(w)
    if channels_last:
        dx = channels_last_view(x)
    out_size = (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
    minimum = nbytes(x, w) + batch * cout * out_size ** spatial * x.element_size()

    def ints(value):
        return ffi.new("int64_t[]", [value] * spatial), spatial

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch_mps_convolution(
            dx.handle, dw.handle, ffi.NULL, *ints(stride), *ints(padding), *ints(dilation), 1,
            *ints(output_padding), groups, r0))
        return [Tensor(r0[0])]

    return run, minimum


def linear_4bit_case(m, k, n, group_size, dtype):
    g = torch.Generator().manual_seed(0)
    groups = k // group_size
    a = torch.randn(m, k, generator=g).to(dtype)
    q = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    packed = quantize.pack_lowbit(q, 4)
    s = (torch.rand(n, groups, generator=g) + 0.01).to(dtype)
    z = torch.zeros(n, groups).to(dtype)
    da, db, ds, dz = device(a), device(packed), device(s), device(z)
    minimum = nbytes(a, packed, s, z) + m * n * a.element_size()

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch_mps__linear_fp_act_4bit_weight(
            da.handle, db.handle, group_size, ds.handle, dz.handle, r0))
        return [Tensor(r0[0])]

    return run, minimum


def gather_qmv_case(pairs, experts, k, n, group_size, dtype):
    g = torch.Generator().manual_seed(0)
    groups = k // group_size
    x = torch.randn(pairs, k, generator=g).to(dtype)
    q = torch.randint(0, 16, (experts, n, k), generator=g, dtype=torch.uint8)
    packed = quantize.pack_lowbit(q, 4)
    s = (torch.rand(experts, n, groups, generator=g) + 0.01).to(dtype)
    z = torch.zeros(experts, n, groups).to(dtype)
    indices = torch.randperm(experts, generator=g)[:pairs].int()  # distinct experts
    dx, dw, ds, dz, di = device(x), device(packed), device(s), device(z), device(indices)
    per_expert = (packed.numel() + 2 * s.numel() * s.element_size()) // experts
    minimum = nbytes(x, indices) + pairs * per_expert + pairs * n * x.element_size()

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch_mps_gather_qmv(dx.handle, dw.handle, ds.handle, dz.handle, di.handle,
                                                       group_size, r0))
        return [Tensor(r0[0])]

    return run, minimum


def embedding_bag_case(rows, features, bags, per_bag, mode, dtype):
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(rows, features, generator=g).to(dtype)
    indices = torch.randint(0, rows, (bags * per_bag,), generator=g)
    offsets = torch.arange(0, bags * per_bag, per_bag)
    dw, di, do = device(weight), device(indices), device(offsets)
    outputs = bags * features
    # The rows the indices name read once; output, offset2bag, bag_size (+ max indices)
    minimum = (nbytes(indices, offsets) + indices.numel() * features * weight.element_size()
               + outputs * weight.element_size() + nbytes(indices, offsets) + (outputs * 8 if mode == 2 else 0))

    def run():
        rets = returned(4)
        etmetal_py.check(lib.aoti_torch_mps__embedding_bag(dw.handle, di.handle, do.handle, 0, mode, 0, ffi.NULL,
                                                           0, -1, *rets))
        return [Tensor(r[0]) for r in rets]

    return run, minimum


def bilinear_case(batch, in1, in2, out_features, dtype):
    """_trilinear as nn.Bilinear calls it: out[b, o] = sum_ij x1[b, i] w[o, i, j] x2[b, j]."""
    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(batch, in1, generator=g).to(dtype), torch.randn(batch, in2, generator=g).to(dtype)
    w = torch.randn(out_features, in1, in2, generator=g).to(dtype)
    d1, d2, dw = device(x1), device(x2), device(w)
    minimum = nbytes(x1, x2, w) + batch * out_features * x1.element_size()
    lists = [ffi.new("int64_t[]", v) for v in ([1, 3], [0], [1, 2], [2, 3])]

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch_mps__trilinear(d1.handle, dw.handle, d2.handle, lists[0], 2, lists[1], 1,
                                                       lists[2], 2, lists[3], 2, 1, r0))
        return [Tensor(r0[0])]

    return run, minimum


def fft_case(kind, lines, n):
    """_fft_r2c (one-sided), _fft_c2c (forward) or _fft_c2r of `lines` signals of length n."""
    g = torch.Generator().manual_seed(0)
    if kind == "c2r":
        x = torch.randn(lines, n // 2 + 1, dtype=torch.complex64, generator=g)
        out = torch.empty(lines, n)
    else:
        x = torch.randn(lines, n, generator=g, dtype=torch.float32 if kind == "r2c" else torch.complex64)
        out = torch.empty(lines, n // 2 + 1 if kind == "r2c" else n, dtype=torch.complex64)
    dx = device(x)
    dims = ffi.new("int64_t[]", [1])
    function, flag = {"r2c": (lib.aoti_torch_mps__fft_r2c, 1), "c2c": (lib.aoti_torch_mps__fft_c2c, 1),
                      "c2r": (lib.aoti_torch_mps__fft_c2r, n)}[kind]

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(function(dx.handle, dims, 1, 0, flag, r0))
        return [Tensor(r0[0])]

    return run, nbytes(x, out)


def index_put_accumulate_case(self_shape, positions, targets, dtype):
    """x[idx] += v in place (index_put_ with accumulate=True): `positions` indices into the first
    `targets` rows of x (many duplicates), values of shape [positions, *x.shape[1:]]."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(self_shape, generator=g).to(dtype)
    rows = torch.randint(0, targets, (positions,), generator=g)
    values = torch.randn((positions,) + tuple(self_shape[1:]), generator=g).to(dtype)
    dx, dr, dv = device(x), device(rows), device(values)
    row_bytes = x[0].numel() * x.element_size()
    minimum = nbytes(rows, values) + 2 * rows.unique().numel() * row_bytes  # the rows reached: read, written

    def run():
        indices = ffi.new("AtenTensorHandle[]", [dr.handle])
        etmetal_py.check(lib.aoti_torch_index_put_out(dx.handle, dx.handle, indices, 1, dv.handle, True))
        return []

    return run, minimum


def scatter_reduce_case(self_shape, index_shape, dim, targets, reduce, dtype):
    """self.scatter_reduce_(dim, index, src, reduce) in place, index values in [0, targets)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(self_shape, generator=g).to(dtype)
    index = torch.randint(0, targets, index_shape, generator=g)
    src = torch.randn(index_shape, generator=g).to(dtype)
    dx, di, ds = device(x), device(index), device(src)
    reached = torch.zeros(self_shape, dtype=torch.bool).scatter_(dim, index, True)
    minimum = nbytes(index, src) + 2 * int(reached.sum()) * x.element_size()  # the elements reached: read, written

    def run():
        etmetal_py.check(lib.aoti_torch_mps_scatter_reduce_two_out(dx.handle, dx.handle, dim, di.handle, ds.handle,
                                                                   reduce.encode(), 1))
        return []

    return run, minimum


def running_case(rows, width, dtype, function):
    """cumsum or cumprod (function: the shim) along the rows; values near 1 keep products finite."""
    x = (1 + (torch.rand(rows, width) - 0.5) * 0.01).to(dtype)
    dx = device(x)
    minimum = nbytes(x) + nbytes(torch.cumsum(x[:, :1], 1)) * width  # integer inputs give int64

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(function(dx.handle, 1, ffi.NULL, r0))
        return [Tensor(r0[0])]

    return run, minimum


def cumulative_extreme_case(rows, width, dtype, function):
    x = (torch.randn(rows, width) * 100).to(dtype)
    dx = device(x)
    minimum = nbytes(x) + rows * width * (x.element_size() + 8)  # values and int64 indices

    def run():
        r0, r1 = returned(2)
        etmetal_py.check(function(dx.handle, 1, r0, r1))
        return [Tensor(r0[0]), Tensor(r1[0])]

    return run, minimum


def logcumsumexp_case(rows, width, dtype):
    x = torch.randn(rows, width).to(dtype)
    dx = device(x)
    minimum = 2 * nbytes(x)

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch_mps_logcumsumexp(dx.handle, 1, r0))
        return [Tensor(r0[0])]

    return run, minimum


def adaptive_pool_case(batch, channels, size, out_size, dtype, take_max):
    x = torch.randn(batch, channels, size, size).to(dtype)
    dx = device(x)
    outputs = batch * channels * out_size * out_size
    minimum = nbytes(x) + outputs * (x.element_size() + (8 if take_max else 0))  # + int64 indices
    sizes = ffi.new("int64_t[]", [out_size, out_size])

    def run():
        r0, r1 = returned(2)
        if take_max:
            etmetal_py.check(lib.aoti_torch_mps_adaptive_max_pool2d(dx.handle, sizes, 2, r0, r1))
            return [Tensor(r0[0]), Tensor(r1[0])]
        etmetal_py.check(lib.aoti_torch_mps__adaptive_avg_pool2d(dx.handle, sizes, 2, r0))
        return [Tensor(r0[0])]

    return run, minimum


def topk_case(rows, width, k, dtype):
    x = torch.randn(rows, width).to(dtype)
    dx = device(x)
    minimum = nbytes(x) + rows * k * (x.element_size() + 8)  # values and int64 indices

    def run():
        r0, r1 = returned(2)
        etmetal_py.check(lib.aoti_torch_mps_topk(dx.handle, k, 1, 1, 1, r0, r1))
        return [Tensor(r0[0]), Tensor(r1[0])]

    return run, minimum


def sort_case(rows, width, dtype):
    x = torch.randn(rows, width).to(dtype)
    dx = device(x)
    minimum = nbytes(x) + rows * width * (x.element_size() + 8)

    def run():
        r0, r1 = returned(2)
        etmetal_py.check(lib.aoti_torch_mps_sort(dx.handle, 1, 0, r0, r1))
        return [Tensor(r0[0]), Tensor(r1[0])]

    return run, minimum


def cdist_case(batch, rows1, rows2, columns, p, dtype):
    g = torch.Generator().manual_seed(0)
    x1 = torch.randn(batch, rows1, columns, generator=g).to(dtype)
    x2 = torch.randn(batch, rows2, columns, generator=g).to(dtype)
    d1, d2 = device(x1), device(x2)
    minimum = nbytes(x1, x2) + batch * rows1 * rows2 * x1.element_size()

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch_mps__cdist_forward(d1.handle, d2.handle, p, ffi.NULL, r0))
        return [Tensor(r0[0])]

    return run, minimum


def pdist_case(rows, columns, p, dtype):
    x = torch.randn(rows, columns, generator=torch.Generator().manual_seed(0)).to(dtype)
    dx = device(x)
    minimum = nbytes(x) + rows * (rows - 1) // 2 * x.element_size()

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch_mps__pdist_forward(dx.handle, p, r0))
        return [Tensor(r0[0])]

    return run, minimum


def grouped_mm_case(a_shape, b_shape, ends, dtype, experts_transposed=False):
    """torch._grouped_mm(a, b, offs=ends); experts_transposed: b is w.transpose(-2, -1) of a
    contiguous w, as MoE layers pass their expert weights."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(*a_shape, generator=g).to(dtype)
    b_stored = torch.randn(*b_shape[:-2], b_shape[-1], b_shape[-2], generator=g).to(dtype) if experts_transposed \
        else torch.randn(*b_shape, generator=g).to(dtype)
    da, weight = device(a), device(b_stored)
    db = weight
    if experts_transposed:
        view = ffi.new("AtenTensorHandle*")
        sizes, strides = list(b_shape), list(b_stored.stride())
        strides[-1], strides[-2] = strides[-2], strides[-1]
        etmetal_py.check(lib.aoti_torch__reinterpret_tensor(weight.handle, len(sizes), ffi.new("int64_t[]", sizes),
                                                            ffi.new("int64_t[]", strides), 0, view))
        db = Tensor(view[0], keepalive=weight)
    offs = torch.tensor(ends, dtype=torch.int32) if ends else None
    doffs = device(offs) if ends else None
    offs_arg = ffi.new("AtenTensorHandle*", doffs.handle) if ends else ffi.NULL
    expected = torch._grouped_mm(a.float(), b_stored.float().transpose(-2, -1) if experts_transposed
                                 else b_stored.float(), offs=offs)
    minimum = nbytes(a, b_stored) + (nbytes(offs) if ends else 0) + expected.numel() * a.element_size()

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch_mps__grouped_mm(da.handle, db.handle, offs_arg, ffi.NULL, ffi.NULL, r0))
        return [Tensor(r0[0]), doffs]  # doffs: the storage offs_arg's handle names

    return run, minimum


F32, F16 = torch.float32, torch.float16
CASES = [  # (op, shape label, factory, arguments)
    ("sdpa", "decode B1 H32/8 S1024 D128 f32", sdpa_case, (1, 32, 8, 1, 1024, 128, F32, False)),
    ("sdpa", "decode B1 H32/32 S4096 D128 f32", sdpa_case, (1, 32, 32, 1, 4096, 128, F32, False)),
    ("sdpa", "decode B1 H32/8 S4096 D128 f16", sdpa_case, (1, 32, 8, 1, 4096, 128, F16, False)),
    ("sdpa", "decode B4 H16/16 S1024 D64 f32", sdpa_case, (4, 16, 16, 1, 1024, 64, F32, False)),
    ("sdpa", "decode B8 H32/8 S512 D128 f16", sdpa_case, (8, 32, 8, 1, 512, 128, F16, False)),
    ("sdpa", "prefill B1 H8/8 L256 D64 f32 causal", sdpa_case, (1, 8, 8, 256, 256, 64, F32, True)),
    ("sdpa", "prefill B1 H8/2 L256 D128 f16 causal", sdpa_case, (1, 8, 2, 256, 256, 128, F16, True)),
    ("sdpa", "prefill B2 H4/4 L128 D64 f32", sdpa_case, (2, 4, 4, 128, 128, 64, F32, False)),
    ("rms_norm", "1 x 4096 f32", rms_norm_case, (1, 4096, F32)),
    ("rms_norm", "8 x 4096 f16", rms_norm_case, (8, 4096, F16)),
    ("rms_norm", "256 x 4096 f32 (prefill)", rms_norm_case, (256, 4096, F32)),
    ("embedding_bag", "1 bag of 4096, 4096x128 f32 mean", embedding_bag_case, (4096, 128, 1, 4096, 1, F32)),
    ("embedding_bag", "64 bags of 64, 4096x128 f32 sum", embedding_bag_case, (4096, 128, 64, 64, 0, F32)),
    ("embedding_bag", "8 bags of 512, 4096x64 f16 max", embedding_bag_case, (4096, 64, 8, 512, 2, F16)),
    # (self shape, positions, rows reached, dtype): x[idx] += v with duplicates
    ("index_put_acc", "1M f32 += 64K values into 16K", index_put_accumulate_case, ((1 << 20,), 1 << 16, 1 << 14, F32)),
    ("index_put_acc", "32000x128 f32 += 4096 rows into 1024", index_put_accumulate_case,
     ((32000, 128), 4096, 1024, F32)),
    ("index_put_acc", "4096x64 f16 += 16 rows into 8", index_put_accumulate_case, ((4096, 64), 16, 8, F16)),
    # (self shape, index shape, dim, index values below, reduce, dtype)
    ("scatter_add", "1M f32, 64K idx into 16K", scatter_reduce_case, ((1 << 20,), (1 << 16,), 0, 1 << 14, "sum", F32)),
    ("scatter_add", "64x16384 f32, 64x4096 idx dim 1 into 1K", scatter_reduce_case,
     ((64, 16384), (64, 4096), 1, 1024, "sum", F32)),
    ("scatter_reduce", "mean 1024x256 f32, 4096x256 idx dim 0", scatter_reduce_case,
     ((1024, 256), (4096, 256), 0, 1024, "mean", F32)),
    ("scatter_reduce", "amax 4096x256 f16, 4096x8 idx dim 1", scatter_reduce_case,
     ((4096, 256), (4096, 8), 1, 256, "amax", F16)),
    ("cumsum", "1 x 32000 f32 (sampling)", running_case, (1, 32000, F32, lib.aoti_torch_mps_cumsum)),
    ("cumsum", "64 x 4096 f32", running_case, (64, 4096, F32, lib.aoti_torch_mps_cumsum)),
    ("cumsum", "1 x 32000 i32 -> i64", running_case, (1, 32000, torch.int32, lib.aoti_torch_mps_cumsum)),
    ("cumsum", "8 x 4096 i64", running_case, (8, 4096, torch.int64, lib.aoti_torch_mps_cumsum)),
    ("cumprod", "1 x 32000 f32", running_case, (1, 32000, F32, lib.aoti_torch_mps_cumprod)),
    ("cumprod", "8 x 4096 f16", running_case, (8, 4096, F16, lib.aoti_torch_mps_cumprod)),
    ("cumprod", "4 x 8192 i64", running_case, (4, 8192, torch.int64, lib.aoti_torch_mps_cumprod)),
    ("cummax", "1 x 32000 f32", cumulative_extreme_case, (1, 32000, F32, lib.aoti_torch_mps_cummax)),
    ("cummin", "8 x 4096 i64", cumulative_extreme_case, (8, 4096, torch.int64, lib.aoti_torch_mps_cummin)),
    ("logcumsumexp", "1 x 32000 f32", logcumsumexp_case, (1, 32000, F32)),
    ("logcumsumexp", "64 x 4096 f16", logcumsumexp_case, (64, 4096, F16)),
    ("topk", "k=50 of 1 x 32000 f32 (sampling)", topk_case, (1, 32000, 50, F32)),
    ("topk", "k=50 of 8 x 32000 f16 (sampling)", topk_case, (8, 32000, 50, F16)),
    ("topk", "k=50 of 1 x 152064 f32 (sampling)", topk_case, (1, 152064, 50, F32)),
    ("topk", "k=256 of 4 x 128256 f32", topk_case, (4, 128256, 256, F32)),
    ("adaptive_pool", "avg global 1x512x32x32 f32", adaptive_pool_case, (1, 512, 32, 1, F32, False)),
    ("adaptive_pool", "max global 1x512x32x32 f32", adaptive_pool_case, (1, 512, 32, 1, F32, True)),
    ("adaptive_pool", "avg 7x7 of 1x512x14x14 f16", adaptive_pool_case, (1, 512, 14, 7, F16, False)),
    ("sort", "1 x 32000 f32", sort_case, (1, 32000, F32)),
    ("sort", "64 x 1024 f32", sort_case, (64, 1024, F32)),
    ("sort", "8 x 32000 f16", sort_case, (8, 32000, F16)),
    ("mm", "decode 1x4096 @ 4096x1024 f32", mm_case, (1, 4096, 1024, F32)),
    ("mm", "decode 1x4096 @ (1024x4096).t() f16", mm_case, (1, 4096, 1024, F16, True)),
    ("mm", "decode 8x2048 @ (2048x2048).t() bf16", mm_case, (8, 2048, 2048, torch.bfloat16, True)),
    ("mm", "decode 4x4096 @ 4096x1024 f32", mm_case, (4, 4096, 1024, F32)),
    ("mm", "decode 15x2048 @ (2048x2048).t() f16", mm_case, (15, 2048, 2048, F16, True)),
    ("mm", "prefill 128x1024 @ 1024x1024 f32", mm_case, (128, 1024, 1024, F32)),
    ("histc", "1M f32 100 bins, data range", histc_case, (1 << 20, 100, 0.0, 0.0, F32)),
    ("histc", "1M f32 100 bins in [-2, 2]", histc_case, (1 << 20, 100, -2.0, 2.0, F32)),
    ("histc", "1M f16 4096 bins in [-3, 3]", histc_case, (1 << 20, 4096, -3.0, 3.0, F16)),
    ("histogram", "1M f32 100 bins, data range", histogram_case, (1 << 20, 100)),
    ("nonzero", "2M f32 at 1%", nonzero_case, ((1 << 21,), 0.01, F32)),
    ("nonzero", "2048 x 1024 bool at 50%", nonzero_case, ((2048, 1024), 0.5, torch.bool)),
    ("masked_select", "2M f32 at 10%", masked_select_case, ((1 << 21,), 0.1, F32)),
    ("linear_4bit", "decode 1x4096 -> 4096 g64 f16", linear_4bit_case, (1, 4096, 4096, 64, F16)),
    ("linear_4bit", "batch 4x4096 -> 4096 g128 f16", linear_4bit_case, (4, 4096, 4096, 128, F16)),
    ("linear_4bit", "batch 8x4096 -> 1024 g64 f16", linear_4bit_case, (8, 4096, 1024, 64, F16)),
    ("gather_qmv", "MoE decode 8 of 64 experts 2048 -> 768 g64 f16", gather_qmv_case, (8, 64, 2048, 768, 64, F16)),
    ("conv2d", "stem 3->16 3x3/2 224x224 f32", conv_case, (1, 3, 16, 224, 3, 2, 1, F32)),
    ("conv2d", "16->32 3x3 56x56 f32", conv_case, (1, 16, 32, 56, 3, 1, 1, F32)),
    ("conv2d", "depthwise 32 3x3 112x112 f32", conv_case, (1, 32, 32, 112, 3, 1, 32, F32)),
    ("conv2d", "pointwise 32->64 1x1 56x56 f32", conv_case, (1, 32, 64, 56, 1, 1, 1, F32)),
    ("conv2d", "resnet stem 3->64 7x7/2 224x224 f32", conv_case, (1, 3, 64, 224, 7, 2, 1, F32)),
    ("conv2d", "resnet 64->64 3x3 56x56 f32", conv_case, (1, 64, 64, 56, 3, 1, 1, F32)),
    ("conv2d", "resnet 64->64 3x3 56x56 f16 channels-last", conv_case, (1, 64, 64, 56, 3, 1, 1, F16, True)),
    ("conv2d", "resnet 64->128 3x3/2 56x56 f32", conv_case, (1, 64, 128, 56, 3, 2, 1, F32)),
    ("conv2d", "resnet 128->128 3x3 28x28 f32", conv_case, (1, 128, 128, 28, 3, 1, 1, F32)),
    ("conv2d", "resnet 256->256 3x3 14x14 f32", conv_case, (1, 256, 256, 14, 3, 1, 1, F32)),
    ("conv2d", "resnet 512->512 3x3 7x7 f32", conv_case, (1, 512, 512, 7, 3, 1, 1, F32)),
    ("conv2d", "resnet 256->64 1x1 56x56 f32", conv_case, (1, 256, 64, 56, 1, 1, 1, F32)),
    ("conv2d", "few pixels 512->512 3x3 2x2 f32", conv_case, (1, 512, 512, 2, 3, 1, 1, F32)),
    ("conv2d", "depthwise 96 5x5/2 112x112 f16", conv_case, (1, 96, 96, 112, 5, 2, 96, F16)),
    # (batch, C_in, C_out, size, kernel, stride, padding, output_padding, dilation, groups, dtype[, spatial, channels-last])
    ("conv_transpose", "unet up 256->128 2x2/2 32x32 f32", conv_transpose_case,
     (1, 256, 128, 32, 2, 2, 0, 0, 1, 1, F32)),
    ("conv_transpose", "unet up 128->64 2x2/2 64x64 f16 channels-last", conv_transpose_case,
     (1, 128, 64, 64, 2, 2, 0, 0, 1, 1, F16, 2, True)),
    ("conv_transpose", "decoder 128->64 4x4/2 p1 32x32 f32", conv_transpose_case,
     (1, 128, 64, 32, 4, 2, 1, 0, 1, 1, F32)),
    ("conv_transpose", "decoder 64->64 4x4/2 p1 64x64 f16", conv_transpose_case,
     (1, 64, 64, 64, 4, 2, 1, 0, 1, 1, F16)),
    ("conv_transpose", "64->64 3x3/2 p1 op1 32x32 f32", conv_transpose_case,
     (1, 64, 64, 32, 3, 2, 1, 1, 1, 1, F32)),
    ("conv_transpose", "64->64 3x3/2 p2 op1 dil2 32x32 f32", conv_transpose_case,
     (1, 64, 64, 32, 3, 2, 2, 1, 2, 1, F32)),
    ("conv_transpose", "128->128 4x4/2 p1 g4 32x32 f32", conv_transpose_case,
     (1, 128, 128, 32, 4, 2, 1, 0, 1, 4, F32)),
    ("conv_transpose", "depthwise 64 4x4/2 p1 32x32 f32", conv_transpose_case,
     (1, 64, 64, 32, 4, 2, 1, 0, 1, 64, F32)),
    ("conv_transpose", "3-D 64->32 2x2x2/2 16^3 f32", conv_transpose_case,
     (1, 64, 32, 16, 2, 2, 0, 0, 1, 1, F32, 3)),
    ("conv_transpose", "3-D 32->32 3x3x3/2 p1 op1 16^3 f16", conv_transpose_case,
     (1, 32, 32, 16, 3, 2, 1, 1, 1, 1, F16, 3)),
    ("trilinear", "bilinear 8 x (64, 64) -> 32 f32", bilinear_case, (8, 64, 64, 32, F32)),
    ("trilinear", "bilinear 32 x (256, 128) -> 64 f16", bilinear_case, (32, 256, 128, 64, F16)),
    ("fft", "rfft 8 x 4096 (power of two)", fft_case, ("r2c", 8, 4096)),
    ("fft", "rfft 8 x 1031 (prime)", fft_case, ("r2c", 8, 1031)),
    ("fft", "fft 4 x 2053 (prime)", fft_case, ("c2c", 4, 2053)),
    ("fft", "fft 1 x 4099 (prime)", fft_case, ("c2c", 1, 4099)),
    ("fft", "rfft 8 x 2062 (2 x 1031)", fft_case, ("r2c", 8, 2062)),
    ("fft", "irfft 8 x 1031 (prime)", fft_case, ("c2r", 8, 1031)),
    ("fft", "fft 16 x 97 (prime)", fft_case, ("c2c", 16, 97)),
    ("fft", "fft 16 x 360 (2^3 3^2 5)", fft_case, ("c2c", 16, 360)),
    ("fft", "fft 4 x 8192 (two threadgroup stages)", fft_case, ("c2c", 4, 8192)),
    ("cdist", "64x1024 vs 64x1024 p2 f32", cdist_case, (1, 64, 64, 1024, 2.0, F32)),
    ("cdist", "B4 256x64 vs 256x64 p1 f32", cdist_case, (4, 256, 256, 64, 1.0, F32)),
    ("cdist", "1000x128 vs 100x128 p2 f16", cdist_case, (1, 1000, 100, 128, 2.0, F16)),
    ("pdist", "256 x 256 p2 f32", pdist_case, (256, 256, 2.0, F32)),
    ("pdist", "100 x 1024 p3 f32", pdist_case, (100, 1024, 3.0, F32)),
    # (a shape, b shape, offsets (running ends) or None, dtype[, b as transposed expert weights])
    ("grouped_mm", "MoE 256x512 @ 8 experts 512x512 f16", grouped_mm_case,
     ((256, 512), (8, 512, 512), [20, 64, 64, 100, 180, 200, 240, 256], F16, True)),
    ("grouped_mm", "MoE 512x1024 @ 8 experts 1024x256 f32", grouped_mm_case,
     ((512, 1024), (8, 1024, 256), [64, 128, 192, 256, 320, 384, 448, 512], F32, True)),
    ("grouped_mm", "batch 8 x 64x512 @ 512x512 f32", grouped_mm_case,
     ((8, 64, 512), (8, 512, 512), None, F32)),
    ("grouped_mm", "columns 4 x 128x256 @ 256x512 f32", grouped_mm_case,
     ((4, 128, 256), (256, 512), [128, 256, 384, 512], F32)),
    ("grouped_mm", "depth 256x1024 @ 1024x256 4 groups f32", grouped_mm_case,
     ((256, 1024), (1024, 256), [256, 512, 768, 1024], F32)),
]


def count(run, minimum):
    run()  # compile outside the window
    etmetal_py.synchronize()
    with etmetal_py.counters() as counted:
        run()
    return counted.dispatches


def use_shape(shape):
    """Ops take launch shape `shape` from their next call on ("gpu", "cpu"; None: the device's own)."""
    if shape is None:
        os.environ.pop("ETMETAL_OP_SHAPES", None)
    else:
        os.environ["ETMETAL_OP_SHAPES"] = shape


def median_ms(run, repeats, shapes):
    """{shape: (median wall ms, median CPU ms)} of `repeats` runs under each launch shape in
    `shapes` (None: the device's own), interleaved so that changes of load hit each alike."""
    before = os.environ.get("ETMETAL_OP_SHAPES") or None
    for shape in shapes:  # compiles, and fills the buffer pool, outside the timed runs
        use_shape(shape)
        run()
        etmetal_py.synchronize()
    walls = {shape: [] for shape in shapes}
    cpus = {shape: [] for shape in shapes}
    for _ in range(repeats):
        for shape in shapes:
            use_shape(shape)
            start, start_cpu = time.perf_counter(), time.process_time()
            run()
            etmetal_py.synchronize()
            walls[shape].append(time.perf_counter() - start)
            cpus[shape].append(time.process_time() - start_cpu)
    use_shape(before)
    return {shape: (statistics.median(walls[shape]) * 1e3, statistics.median(cpus[shape]) * 1e3)
            for shape in shapes}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="cases whose op or shape contains this text")
    parser.add_argument("--time", action="store_true", help="median wall ms per op instead of traffic")
    parser.add_argument("--compare-shapes", action="store_true",
                        help="with --time: time the GPU and the CPU launch shapes, interleaved")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per op with --time (default 5)")
    args = parser.parse_args()
    cases = [c for c in CASES if args.only in c[0] or args.only in c[1]]
    print(f"device: {etmetal_py.device_name()}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if args.time and args.compare_shapes:
        print("launch shapes: gpu (Metal's) and cpu (the CPU device's), medians of interleaved runs")
        print(f"{'op':12} {'shape':40} {'gpu wall':>9} {'gpu cpu':>9} {'cpu wall':>9} {'cpu cpu':>9} "
              f"{'cpu/gpu':>8}")
        for op, label, factory, arguments in cases:
            run, _ = factory(*arguments)
            ms = median_ms(run, args.repeats, ("gpu", "cpu"))
            print(f"{op:12} {label:40} {ms['gpu'][0]:9.2f} {ms['gpu'][1]:9.2f} {ms['cpu'][0]:9.2f} "
                  f"{ms['cpu'][1]:9.2f} {ms['cpu'][1] / ms['gpu'][1]:8.2f}", flush=True)
        return
    if args.time:
        shape = os.environ.get("ETMETAL_OP_SHAPES") or None
        print("launch shapes:", shape or "the device's own (ETMETAL_OP_SHAPES unset)")
        print(f"{'op':12} {'shape':40} {'wall ms':>10} {'cpu ms':>10}")
        for op, label, factory, arguments in cases:
            run, _ = factory(*arguments)
            wall, cpu = median_ms(run, args.repeats, (shape,))[shape]
            print(f"{op:12} {label:40} {wall:10.2f} {cpu:10.2f}", flush=True)
        return
    print(f"launch shapes: {os.environ['ETMETAL_OP_SHAPES']} (ETMETAL_OP_SHAPES)")
    print("bytes = device-memory bytes read + written by all the op's dispatches; minimum = inputs read")
    print("once + outputs written once; threads / groups = largest dispatch of the op")
    print(f"{'op':12} {'shape':40} {'MB':>9} {'min MB':>9} {'ratio':>7} {'threads':>9} {'groups':>7}  kernels")
    for op, label, factory, arguments in cases:
        run, minimum = factory(*arguments)
        dispatches = count(run, minimum)
        total = sum(d.bytes_read + d.bytes_written for d in dispatches)
        widest = max(dispatches, key=lambda d: d.threads)
        kernels = ", ".join(f"{d.kernel}[{d.threads}t/{(d.bytes_read + d.bytes_written) / 1e6:.2f}MB]"
                            for d in dispatches)
        print(f"{op:12} {label:40} {total / 1e6:9.3f} {minimum / 1e6:9.3f} {total / minimum:7.2f} "
              f"{widest.threads:9d} {widest.threadgroups:7d}  {kernels}", flush=True)


if __name__ == "__main__":
    main()
