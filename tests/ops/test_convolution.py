"""aoti_torch_mps_convolution against torch eager CPU (aten.convolution in float64 on the same
rounded inputs).

Tolerances, relative to the scale sqrt(R) of a random-normal sum of R = C_in/groups * kernel
volume products: float32 1e-5, float16 1e-2, bfloat16 2e-2 (products accumulate in float32,
only the stored result is rounded)."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import device_view, launch_shape, poisoning_failure, random  # noqa: F401

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Bias on and off in float32; the half-precision runs keep the bias (it is one more rounded input).
DTYPE_BIAS = [(torch.float32, True), (torch.float32, False), (torch.float16, True), (torch.bfloat16, True)]
TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}


def int_array(values):
    return ffi.new("int64_t[]", list(values)), len(values)


def call(input, weight, bias, stride, padding, dilation, transposed=False, output_padding=None,
         groups=1, bias_handle=None):
    """(code, result Tensor or None) of the etmetal call on device copies of the operands."""
    spatial = input.dim() - 2
    output_padding = [0] * spatial if output_padding is None else output_padding
    device_input, device_weight = device_view(input), device_view(weight)
    device_bias = device_view(bias) if bias is not None else None
    if bias_handle is None:
        bias_handle = ffi.new("AtenTensorHandle*", device_bias.handle) if device_bias else ffi.NULL
    ret = ffi.new("AtenTensorHandle*")
    code = lib.aoti_torch_mps_convolution(
        device_input.handle, device_weight.handle, bias_handle, *int_array(stride), *int_array(padding),
        *int_array(dilation), int(transposed), *int_array(output_padding), groups, ret)
    return code, (Tensor(ret[0]) if code == 0 else None)


def reference(input, weight, bias, stride, padding, dilation, transposed=False, output_padding=None,
              groups=1):
    spatial = input.dim() - 2
    output_padding = [0] * spatial if output_padding is None else output_padding
    return torch.ops.aten.convolution(input.double(), weight.double(),
                                      bias.double() if bias is not None else None, stride, padding,
                                      dilation, transposed, output_padding, groups)


def check(input, weight, bias, stride, padding, dilation, transposed=False, output_padding=None,
          groups=1):
    code, result = call(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    etmetal_py.check(code)
    expected = reference(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    value = result.torch()
    assert value.dtype == input.dtype
    assert tuple(value.shape) == tuple(expected.shape)
    reduction = (input.shape[1] // groups) * math.prod(weight.shape[2:])
    tolerance = TOLERANCE[input.dtype]
    torch.testing.assert_close(value.double(), expected, rtol=tolerance,
                               atol=tolerance * max(1.0, math.sqrt(reduction)))
    return result


# (input shape, weight shape, stride, padding, dilation, groups)
FORWARD_CASES = [
    ((2, 3, 17), (4, 3, 3), [1], [0], [1], 1),
    ((1, 4, 20), (6, 2, 5), [2], [3], [2], 2),
    ((2, 3, 9, 11), (5, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    ((1, 6, 13, 10), (4, 3, 3, 2), [2, 3], [1, 0], [2, 1], 2),
    ((2, 8, 12, 12), (8, 1, 3, 3), [1, 1], [1, 1], [1, 1], 8),  # depthwise
    ((1, 4, 7, 7), (6, 4, 1, 1), [1, 1], [0, 0], [1, 1], 1),  # pointwise
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 3), [1, 2, 1], [1, 0, 2], [2, 1, 1], 1),
    ((2, 4, 4, 5, 6), (4, 1, 3, 3, 3), [2, 1, 1], [1, 1, 1], [1, 1, 2], 4),
    # Flattened implicit GEMM (>= 8 output pixels, >= 16 output channels per group, depth >= 16)
    # where the pixel-block kernel does not fit: a 1-D problem, fewer than 4 output rows, an
    # input window too wide for threadgroup memory, planes of fewer than 32 pixels (the deep
    # layers of a small-image network; one partial pixel block, padding on every side).
    ((2, 16, 40), (32, 16, 3), [1], [1], [1], 1),
    ((2, 6, 3, 30), (20, 6, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    ((1, 4, 40, 40), (16, 4, 5, 5), [4, 4], [0, 0], [3, 3], 1),
    ((2, 24, 4, 4), (40, 24, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    ((2, 20, 2, 3), (36, 10, 3, 3), [1, 1], [1, 1], [1, 1], 2),
    ((2, 18, 8, 7), (34, 18, 3, 3), [2, 2], [1, 1], [1, 1], 1),
    # Fewer than 8 output pixels, or fewer than 32 with 32 output channels per group or more:
    # a patch matrix times the weight rows on the matrix-product kernels (2-D with groups, 1-D,
    # 3-D with one output pixel, 16 and 9 pixels), and the direct kernel for fewer than 16
    # output channels per group.
    ((1, 20, 2, 2), (24, 20, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    ((2, 16, 1, 3), (32, 8, 3, 3), [1, 1], [1, 1], [1, 1], 2),
    ((1, 32, 5), (20, 32, 3), [2], [0], [1], 1),
    ((1, 8, 2, 2, 2), (16, 8, 2, 2, 2), [1, 1, 1], [0, 0, 0], [1, 1, 1], 1),
    ((1, 24, 4, 4), (40, 24, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    ((1, 16, 5, 6), (64, 8, 3, 3), [2, 2], [1, 1], [1, 1], 2),
    ((1, 4, 2, 2), (6, 4, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    # Pixel-block implicit GEMM (>= 32 output pixels and >= 4 rows per plane), with partial blocks
    # in rows, columns, output channels and input channel chunks:
    ((2, 5, 9, 11), (20, 5, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    ((2, 8, 12, 9), (34, 4, 3, 2), [2, 1], [1, 0], [2, 1], 2),
    ((1, 12, 10, 9), (40, 12, 3, 3), [1, 1], [1, 1], [1, 1], 1),  # 64-channel blocks
    ((1, 8, 14, 14), (16, 8, 3, 3), [1, 1], [2, 2], [2, 2], 1),
    ((1, 16, 9, 10), (24, 16, 1, 1), [1, 1], [0, 0], [1, 1], 1),
    ((1, 6, 21, 19), (36, 3, 3, 3), [2, 2], [1, 1], [1, 1], 2),  # 8-column blocks (window size)
    ((1, 3, 24, 24), (40, 3, 7, 7), [2, 2], [3, 3], [1, 1], 1),  # 8 columns, 32 channels (window size)
    ((1, 4, 5, 6, 7), (16, 4, 2, 2, 2), [1, 1, 1], [0, 1, 0], [1, 1, 1], 1),
    ((1, 10, 5, 8, 9), (12, 5, 3, 3, 3), [2, 1, 1], [1, 1, 0], [1, 1, 1], 2),
    # Depthwise kernel (one input channel per group), multipliers 1, 2 and 8:
    ((2, 4, 20, 35), (8, 1, 3, 3), [2, 1], [1, 2], [1, 2], 4),
    ((1, 3, 10, 10), (3, 1, 5, 5), [1, 1], [2, 2], [1, 1], 3),
    ((2, 6, 50), (6, 1, 4), [1], [3], [1], 6),
    ((1, 1, 12, 12), (8, 1, 3, 3), [1, 1], [0, 0], [1, 1], 1),
    ((1, 2, 40, 40), (2, 1, 9, 9), [4, 4], [0, 0], [4, 4], 2),  # window too large: direct kernel
]


@pytest.mark.parametrize("dtype,with_bias", DTYPE_BIAS)
@pytest.mark.parametrize("input_shape,weight_shape,stride,padding,dilation,groups", FORWARD_CASES)
def test_forward(input_shape, weight_shape, stride, padding, dilation, groups, with_bias, dtype, no_leaks):
    input, weight = random(*input_shape, dtype=dtype), random(*weight_shape, dtype=dtype)
    bias = random(weight_shape[0], dtype=dtype) if with_bias else None
    check(input, weight, bias, stride, padding, dilation, groups=groups)


# Pixel-block implicit GEMM in both launch shapes: the GPU's (32- and 64-channel blocks, results
# through a per-simdgroup scratch) and the CPU device's (16-channel blocks for up to 16 channels,
# weights staged by (tap, channel) runs, results written by runs of pixels). Partial blocks in
# rows, columns, output channels (16-, 32- and 64-channel blocks) and input channel chunks;
# strided and dilated taps, groups, a 3-D problem, a channels-last output.
PIXEL_BLOCK_CASES = [
    ((1, 3, 19, 21), (16, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    ((2, 10, 17, 9), (12, 10, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    ((1, 16, 12, 24), (24, 16, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    ((1, 8, 20, 20), (40, 8, 3, 3), [2, 2], [1, 1], [1, 1], 1),
    ((1, 12, 16, 16), (20, 6, 3, 3), [1, 1], [2, 2], [2, 2], 2),
    ((1, 16, 16, 17), (3, 16, 1, 1), [1, 1], [0, 0], [1, 1], 1),
    ((1, 4, 3, 9, 10), (10, 4, 2, 3, 3), [1, 1, 1], [1, 1, 1], [1, 1, 1], 1),
]


@pytest.mark.parametrize("dtype,with_bias", DTYPE_BIAS)
@pytest.mark.parametrize("input_shape,weight_shape,stride,padding,dilation,groups", PIXEL_BLOCK_CASES)
def test_pixel_blocks_in_both_launch_shapes(input_shape, weight_shape, stride, padding, dilation, groups, with_bias,
                                            dtype, launch_shape, no_leaks):
    input, weight = random(*input_shape, dtype=dtype), random(*weight_shape, dtype=dtype)
    bias = random(weight_shape[0], dtype=dtype) if with_bias else None
    check(input, weight, bias, stride, padding, dilation, groups=groups)


@pytest.mark.parametrize("input_shape,weight_shape,stride,padding,dilation,groups", PIXEL_BLOCK_CASES)
def test_pixel_blocks_same_bits_in_both_launch_shapes(input_shape, weight_shape, stride, padding, dilation, groups,
                                                      monkeypatch, no_leaks):
    # The shapes differ in block widths and in how operands are staged and results stored, not in
    # what each output sums or in which order: the results are the same bits.
    input, weight, bias = random(*input_shape), random(*weight_shape), random(weight_shape[0])
    results = []
    for shape in ("gpu", "cpu"):
        monkeypatch.setenv("ETMETAL_OP_SHAPES", shape)
        results.append(check(input, weight, bias, stride, padding, dilation, groups=groups).torch())
    assert torch.equal(results[0], results[1])


def test_pixel_blocks_channels_last_in_both_launch_shapes(launch_shape, no_leaks):
    # Channels-last input and weight (unit channel strides); the result is contiguous and the
    # same bits as from contiguous operands.
    input = random(2, 12, 18, 20).contiguous(memory_format=torch.channels_last)
    weight = random(16, 12, 3, 3).contiguous(memory_format=torch.channels_last)
    bias = random(16)
    result = check(input, weight, bias, [1, 1], [1, 1], [1, 1])
    contiguous = check(input.contiguous(), weight.contiguous(), bias, [1, 1], [1, 1], [1, 1])
    assert torch.equal(result.torch(), contiguous.torch())


PATH_PROBE = """
import sys, torch
sys.path[:0] = sys.argv[1:]
from test_convolution import call
import etmetal_py
torch.manual_seed(3)
input, weight, bias = torch.randn(1, 9, 18, 19), torch.randn(20, 9, 3, 3), torch.randn(20)
code, result = call(input, weight, bias, [1, 1], [1, 1], [1, 1])
etmetal_py.check(code)
sys.stdout.write(result.torch().numpy().tobytes().hex())
"""


@pytest.mark.parametrize("shape", ["gpu", "cpu"])
def test_pixel_blocks_same_bits_on_fibers_and_barrier_regions(shape):
    # The CPU device runs the pixel-block kernels (convolution_tiled, convolution_strips in the CPU
    # shape) as barrier regions; on fibers (one context per thread, the reference semantics) they
    # must give the same bits. The path is chosen when the library loads, so each runs in a
    # process of its own.
    kernel = "convolution_tiled_2x4_float" if shape == "gpu" else "convolution_strips_2x4_float"
    results = {}
    for path in ("regions", "fibers"):
        env = dict(os.environ, ETMETAL_OP_SHAPES=shape, ETMETAL_CPU_EXECUTION=path, ETMETAL_LOG="debug")
        here = Path(__file__).resolve().parent
        run = subprocess.run([sys.executable, "-c", PATH_PROBE, str(here), str(here.parent)], env=env,
                             cwd=here.parents[1], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-3000:]
        expected_path = "barrier regions" if path == "regions" else "fibers"
        assert f"kernel '{kernel}' runs as {expected_path}" in run.stderr, run.stderr[-3000:]
        results[path] = run.stdout
    assert results["regions"] == results["fibers"]


# (input shape, weight shape [C_in, C_out/groups, *k], stride, padding, dilation, output_padding, groups)
TRANSPOSED_CASES = [
    ((2, 3, 9), (3, 4, 3), [2], [1], [1], [1], 1),
    ((1, 4, 7), (4, 3, 4), [3], [0], [2], [1], 2),
    ((2, 4, 5, 6), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], [1, 0], 1),
    ((1, 6, 4, 7), (6, 2, 2, 3), [1, 3], [0, 2], [2, 1], [1, 2], 3),
    ((1, 4, 6, 6), (4, 1, 3, 3), [2, 2], [1, 1], [1, 1], [0, 1], 4),  # depthwise
    ((1, 2, 3, 4, 5), (2, 3, 2, 3, 2), [2, 1, 3], [0, 1, 1], [1, 2, 1], [1, 0, 2], 1),
    # One forward problem per output phase, through the block kernels: pixel-block GEMM (odd
    # sizes, partial blocks, 2 taps per phase and dimension), with groups, in 3-D;
    ((1, 8, 9, 11), (8, 20, 4, 4), [2, 2], [1, 1], [1, 1], [0, 0], 1),
    ((2, 6, 7, 9), (6, 18, 3, 3), [2, 2], [1, 1], [1, 1], [1, 1], 2),
    ((1, 4, 5, 6, 7), (4, 8, 3, 3, 2), [2, 2, 1], [1, 0, 1], [1, 1, 2], [1, 1, 0], 1),
    # flattened GEMM (a 1-D problem), depthwise (one input channel per group);
    ((2, 16, 20), (16, 32, 3), [2], [1], [1], [1], 1),
    ((1, 4, 10, 9), (4, 2, 3, 3), [2, 2], [1, 1], [1, 1], [1, 0], 4),
    # phases no tap reaches (bias only), dilation sharing a factor with the stride, padding past
    # the kernel (the phases' forward padding is negative);
    ((1, 3, 5, 6), (3, 4, 1, 1), [3, 2], [0, 0], [1, 1], [2, 1], 1),
    ((1, 4, 6, 5), (4, 16, 3, 3), [4, 2], [2, 1], [2, 2], [3, 1], 1),
    ((1, 8, 11, 10), (8, 16, 5, 5), [2, 3], [4, 3], [1, 1], [1, 2], 1),
    # more phases than one dispatch each is worth: the direct kernel.
    ((1, 2, 3, 3), (2, 3, 2, 2), [9, 9], [0, 0], [1, 1], [0, 0], 1),
]


@pytest.mark.parametrize("dtype,with_bias", DTYPE_BIAS)
@pytest.mark.parametrize("input_shape,weight_shape,stride,padding,dilation,output_padding,groups",
                         TRANSPOSED_CASES)
def test_transposed(input_shape, weight_shape, stride, padding, dilation, output_padding, groups,
                    with_bias, dtype, no_leaks):
    input, weight = random(*input_shape, dtype=dtype), random(*weight_shape, dtype=dtype)
    bias = random(weight_shape[1] * groups, dtype=dtype) if with_bias else None
    check(input, weight, bias, stride, padding, dilation, True, output_padding, groups)


# Kernel == stride, no padding: one GEMM (convolution_transposed_gemm, 128 x 128 blocks of input
# pixels x (output channel, tap) pairs, 16 input channels per step), specialised by function
# constants. Aligned: pixels and C_out/groups * taps multiples of 128, C_in/groups of 16 (the
# kernel checks no edge); unaligned: partial blocks in rows, columns and depth.
# (input shape, weight shape [C_in, C_out/groups, *k] with k == stride, groups)
ALIGNED_128 = ((2, 32, 8, 8), (32, 32, 2, 2), 1)       # 128 pixels, 128 columns, depth 32
ALIGNED_GROUPS = ((1, 64, 16, 16), (64, 16, 2, 4), 2)  # 256 pixels, 2 x 4 taps, 2 groups of 32
UNALIGNED_2D = ((1, 20, 9, 15), (20, 35, 2, 2), 1)     # 135 pixels, 140 columns, depth 20
UNALIGNED_1D = ((2, 54, 70), (54, 40, 4), 3)           # 140 pixels, 160 columns, 3 groups of 18
UNALIGNED_3D = ((1, 16, 5, 6, 7), (16, 20, 2, 2, 2), 1)  # 210 pixels, 160 columns
F32 = torch.float32


# Float32 with and without bias; one variant each in half precision (each is one more compile).
@pytest.mark.parametrize("problem,dtype,with_bias", [
    (ALIGNED_128, F32, True), (ALIGNED_128, F32, False), (ALIGNED_GROUPS, F32, True),
    (UNALIGNED_2D, F32, True), (UNALIGNED_2D, F32, False), (UNALIGNED_1D, F32, True), (UNALIGNED_3D, F32, False),
    (ALIGNED_GROUPS, torch.float16, True), (UNALIGNED_2D, torch.bfloat16, True)])
def test_transposed_kernel_equal_to_stride(problem, dtype, with_bias, no_leaks):
    input_shape, weight_shape, groups = problem
    input, weight = random(*input_shape, dtype=dtype), random(*weight_shape, dtype=dtype)
    bias = random(weight_shape[1] * groups, dtype=dtype) if with_bias else None
    stride = list(weight_shape[2:])
    spatial = len(stride)
    check(input, weight, bias, stride, [0] * spatial, [1] * spatial, True, [0] * spatial, groups)


@pytest.mark.parametrize("problem", [ALIGNED_128, UNALIGNED_2D])
def test_transposed_kernel_equal_to_stride_channels_last_and_strided(problem, no_leaks):
    input_shape, weight_shape, groups = problem
    input = random(*input_shape).contiguous(memory_format=torch.channels_last)
    weight = random(*weight_shape).contiguous(memory_format=torch.channels_last)
    bias = random(2 * weight_shape[1])[::2]
    args = (list(weight_shape[2:]), [0, 0], [1, 1], True, [0, 0], groups)
    result = check(input, weight, bias, *args)
    assert torch.equal(result.torch(), check(input.contiguous(), weight.contiguous(), bias, *args).torch())
    # An offset, strided input and a permuted weight.
    base = random(input_shape[0] + 1, 2 * input_shape[1], *input_shape[2:])
    strided = base[1:, ::2]
    permuted = random(*weight_shape[2:], weight_shape[1], weight_shape[0]).permute(3, 2, 0, 1)
    assert strided.storage_offset() > 0 and not strided.is_contiguous() and not permuted.is_contiguous()
    check(strided, permuted, bias, *args)


def test_single_value_parameter_lists_apply_to_every_dimension(no_leaks):
    input, weight = random(1, 2, 9, 8), random(3, 2, 3, 3)
    code, result = call(input, weight, None, [2], [1], [1])
    etmetal_py.check(code)
    expected = reference(input, weight, None, [2, 2], [1, 1], [1, 1])
    torch.testing.assert_close(result.torch().double(), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("transposed", [False, True])
def test_channels_last_input_gives_the_contiguous_result(transposed, dtype, no_leaks):
    # Contiguous is what Inductor compiles for this call's result (see the e2e test below).
    input = random(2, 6, 9, 7, dtype=dtype).contiguous(memory_format=torch.channels_last)
    # Forward takes the implicit GEMM (16 output channels per group), transposed the pixel-block
    # GEMM per output phase.
    weight = random(6, 4, 3, 3, dtype=dtype) if transposed else random(32, 3, 3, 3, dtype=dtype)
    bias = random(8 if transposed else 32, dtype=dtype)
    args = ([2, 1], [1, 1], [1, 2], transposed, [1, 0] if transposed else [0, 0], 2)
    result = check(input, weight, bias, *args)
    n, c, h, w = result.sizes
    assert result.strides == (c * h * w, h * w, w, 1)
    contiguous = check(input.contiguous(), weight, bias, *args)
    assert torch.equal(result.torch(), contiguous.torch())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("groups,out_channels,size", [(1, 24, 12), (8, 8, 12), (1, 24, 4), (1, 24, 2)])
def test_channels_last_input_and_weight_in_the_block_kernels(groups, out_channels, size, dtype, no_leaks):
    # Pixel-block GEMM, depthwise, flattened GEMM (a 4 x 3 plane: the layout Inductor gives the
    # deep layers of a small-image network), the patch matrix product (2 x 1: it sums in the
    # order the weight lies in memory, so the two layouts round differently and each is checked
    # against the reference alone).
    input = random(2, 8, size, size - 1, dtype=dtype).contiguous(memory_format=torch.channels_last)
    weight = random(out_channels, 8 // groups, 3, 3, dtype=dtype).contiguous(memory_format=torch.channels_last)
    bias = random(out_channels, dtype=dtype)
    result = check(input, weight, bias, [1, 1], [1, 1], [1, 1], groups=groups)
    contiguous = check(input.contiguous(), weight.contiguous(), bias, [1, 1], [1, 1], [1, 1], groups=groups)
    if size > 2:
        assert torch.equal(result.torch(), contiguous.torch())


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "taps_outermost", "sliced"])
def test_few_output_pixels_with_any_weight_layout(layout, no_leaks):
    # The patch matrix follows the weight's memory order where its per-channel blocks are dense
    # (the first three layouts); a sliced weight's are not, and it takes the direct kernel.
    input = random(1, 20, 3, 2)
    if layout == "sliced":
        weight = random(24, 40, 3, 3)[:, ::2]
    else:
        weight = random(24, 20, 3, 3)
    if layout == "channels_last":
        weight = weight.contiguous(memory_format=torch.channels_last)
    elif layout == "taps_outermost":
        weight = random(3, 3, 24, 20).permute(2, 3, 0, 1)
    check(input, weight, random(24), [2, 1], [1, 1], [1, 1])


def test_channels_last_3d_input_and_weight(no_leaks):
    input = random(1, 3, 4, 5, 6).contiguous(memory_format=torch.channels_last_3d)
    weight = random(2, 3, 2, 2, 2).contiguous(memory_format=torch.channels_last_3d)
    result = check(input, weight, None, [1, 1, 1], [0, 1, 0], [1, 1, 1])
    n, c, d, h, w = result.sizes
    assert result.strides == (c * d * h * w, d * h * w, h * w, w, 1)


@pytest.mark.parametrize("out_channels", [4, 16])  # direct kernel, implicit GEMM
def test_strided_offset_input_and_permuted_weight(out_channels, no_leaks):
    input = random(3, 8, 15, 13)[1:, ::2, 2:, 1::2]
    weight = random(3, 3, out_channels, 4).permute(2, 3, 0, 1)  # [C_out, 4, 3, 3], non-contiguous
    assert input.storage_offset() > 0 and not input.is_contiguous() and not weight.is_contiguous()
    bias = random(2 * out_channels)[::2]
    check(input, weight, bias, [1, 2], [1, 0], [1, 1])


def test_transposed_strided_offset_input_and_permuted_weight(no_leaks):
    input = random(3, 8, 15, 21)[1:, ::2, 2:, ::2]  # [2, 4, 13, 11]
    weight = random(3, 3, 20, 4).permute(3, 2, 0, 1)  # [C_in 4, C_out 20, 3, 3], non-contiguous
    assert input.storage_offset() > 0 and not input.is_contiguous() and not weight.is_contiguous()
    bias = random(40)[::2]
    check(input, weight, bias, [2, 2], [1, 0], [1, 1], True, [1, 1])


@pytest.mark.slow
def test_transposed_phases_read_only_inside_the_weight_binding():
    # A phase walks its taps backwards (negative strides) from its first tap. Bound at that tap
    # the weight was read before its binding, which the kernel sanitizer reports (it checks every
    # access against its binding's offset and length); bound from its first element it is not.
    # The flag selects how kernels compile, so the test runs in a process that has it from the start.
    env = dict(os.environ, ETMETAL_VALIDATE="1", ETMETAL_DEVICE="cpu")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             f"{__file__}::test_transposed_strided_offset_input_and_permuted_weight"],
                            env=env, capture_output=True, text=True)
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-4000:] + result.stderr[-2000:]


def test_empty_batch_gives_empty_output(no_leaks):
    input, weight = torch.empty(0, 3, 8, 8), random(4, 3, 3, 3)
    code, result = call(input, weight, None, [1, 1], [0, 0], [1, 1])
    etmetal_py.check(code)
    assert result.sizes == (0, 4, 6, 6)


# -- bad input ---------------------------------------------------------------------------

def expect_error(code, *fragments):
    """The call failed with a message naming the op and the problem, and poisoned the stream."""
    poisoning_failure(code, "convolution", *fragments)


def test_channel_mismatch(no_leaks):
    code, _ = call(random(1, 3, 8, 8), random(4, 2, 3, 3), None, [1, 1], [0, 0], [1, 1])
    expect_error(code, "expects 2 input channels", "has 3")


def test_groups_must_divide_channels(no_leaks):
    code, _ = call(random(1, 6, 8, 8), random(5, 3, 3, 3), None, [1, 1], [0, 0], [1, 1], groups=2)
    expect_error(code, "5 output channels are not divisible by 2 groups")
    code, _ = call(random(1, 5, 8, 8), random(4, 1, 3, 3), None, [1, 1], [0, 0], [1, 1], groups=2)
    expect_error(code, "5 input channels are not divisible by 2 groups")


def test_rank_mismatch(no_leaks):
    code, _ = call(random(1, 3, 8), random(4, 3, 3, 3), None, [1], [0], [1])
    expect_error(code, "does not match input")


def test_kernel_larger_than_padded_input(no_leaks):
    code, _ = call(random(1, 3, 4, 4), random(2, 3, 5, 5), None, [1, 1], [0, 0], [1, 1])
    expect_error(code, "too small")


def test_bad_parameter_lists(no_leaks):
    input, weight = random(1, 3, 8, 8), random(2, 3, 3, 3)
    code, _ = call(input, weight, None, [1, 1, 1], [0, 0], [1, 1])
    expect_error(code, "stride has 3 values for a 2-D convolution")
    code, _ = call(input, weight, None, [0, 1], [0, 0], [1, 1])
    expect_error(code, "stride must be >= 1")
    code, _ = call(input, weight, None, [1, 1], [-1, 0], [1, 1])
    expect_error(code, "padding must be >= 0")
    code, _ = call(input, weight, None, [1, 1], [0, 0], [1, 1], output_padding=[1, 0])
    expect_error(code, "applies only to transposed")
    code, _ = call(input, random(3, 2, 3, 3), None, [2, 2], [0, 0], [1, 1], True, [2, 0])
    expect_error(code, "smaller than stride or dilation")


def test_unsupported_and_mixed_dtypes(no_leaks):
    code, _ = call(torch.ones(1, 3, 8, 8, dtype=torch.int32), torch.ones(2, 3, 3, 3, dtype=torch.int32), None,
                   [1, 1], [0, 0], [1, 1])
    expect_error(code, "int32", "supported are float32, float16 and bfloat16")
    code, _ = call(random(1, 3, 8, 8), random(2, 3, 3, 3, dtype=torch.float16), None, [1, 1], [0, 0], [1, 1])
    expect_error(code, "weight has dtype float16 but input has float32")
    code, _ = call(random(1, 3, 8, 8), random(2, 3, 3, 3), random(2, dtype=torch.bfloat16), [1, 1], [0, 0],
                   [1, 1])
    expect_error(code, "bias has dtype bfloat16")


def test_bias_of_wrong_size(no_leaks):
    code, _ = call(random(1, 3, 8, 8), random(2, 3, 3, 3), random(3), [1, 1], [0, 0], [1, 1])
    expect_error(code, "bias of shape [3] does not match 2 output channels")


def test_null_handles(no_leaks):
    input, weight = Tensor.from_array(random(1, 3, 8, 8), copy=True), Tensor.from_array(random(2, 3, 3, 3), copy=True)
    ret = ffi.new("AtenTensorHandle*")
    ones = ffi.new("int64_t[]", [1, 1])
    zeros = ffi.new("int64_t[]", [0, 0])
    code = lib.aoti_torch_mps_convolution(ffi.NULL, weight.handle, ffi.NULL, ones, 2, zeros, 2, ones, 2, 0,
                                          zeros, 2, 1, ret)
    expect_error(code, "null tensor handle")
    code = lib.aoti_torch_mps_convolution(input.handle, weight.handle, ffi.new("AtenTensorHandle*"), ones, 2,
                                          zeros, 2, ones, 2, 0, zeros, 2, 1, ret)
    expect_error(code, "bias points to a null handle")
    code = lib.aoti_torch_mps_convolution(input.handle, weight.handle, ffi.NULL, ones, 2, zeros, 2, ones, 2, 0,
                                          zeros, 2, 1, ffi.NULL)
    expect_error(code, "ret0 is null")


class ConvolutionModel(torch.nn.Module):
    """Convolutions that Inductor lowers to the fallback, with its layout optimization (it
    converts conv inputs and weights to channels-last) and generated kernels reading the
    results with the strides it compiled."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, stride=2)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.up = torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.conv1d = torch.nn.Conv1d(4, 6, 5, padding=2, dilation=2)
        self.linear = torch.nn.Linear(6, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        y = self.up(self.depthwise(y) + y)  # [B, 4, 16, 16]
        z = self.conv1d(y.flatten(2))       # [B, 6, 256]
        return self.linear(z.transpose(1, 2)).sigmoid()


@pytest.mark.slow
def test_compiled_model_matches_eager(tmp_path):
    torch.manual_seed(0)
    model = ConvolutionModel().eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        path = etmetal_py.aoti_compile_and_package(etmetal_py.export(model, (x,)), tmp_path / "conv.pt2")
        runner = etmetal_py.aoti_load_package(path)
        result = runner(x)
        result = result[0] if isinstance(result, (list, tuple)) else result
        torch.testing.assert_close(result, model(x), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_large(dtype):
    input, weight, bias = random(4, 32, 40, 40, dtype=dtype), random(64, 32, 3, 3, dtype=dtype), random(64, dtype=dtype)
    check(input, weight, bias, [1, 1], [1, 1], [1, 1])
    check(input, random(32, 16, 4, 4, dtype=dtype), None, [2, 2], [1, 1], [1, 1], True, [0, 0], 1)
