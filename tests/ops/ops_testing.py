"""Helpers shared by the op tests: device copies of torch tensors (any sizes, strides and
storage offset), the once-per-module leak check, the fixture that runs a test with each launch
shape, scale-relative comparison, the check that a failed call poisoned the stream, and
compiling a model whose generated code must call given C functions."""

import gc
import zipfile

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from etmetal_testing import allocator_stats, fails


def to_device(x):
    """A contiguous device copy of `x`."""
    return Tensor.from_array(x, copy=True)


def reinterpret(base, sizes, strides, offset=0):
    """A view of the device tensor `base` (which the caller keeps alive) with these sizes,
    strides and storage offset, in elements."""
    out = ffi.new("AtenTensorHandle*")
    etmetal_py.check(lib.aoti_torch__reinterpret_tensor(
        base.handle, len(sizes), ffi.new("int64_t[]", list(sizes)),
        ffi.new("int64_t[]", list(strides)), offset, out))
    return Tensor(out[0])


def device_view(view):
    """A device tensor with `view`'s values, sizes, strides and storage offset: the view's
    whole storage is copied to the device and the view is rebuilt over it."""
    base = torch.as_strided(view, (view.untyped_storage().size() // view.element_size(),), (1,), 0)
    device_base = to_device(base.clone())
    result = reinterpret(device_base, view.shape, view.stride(), view.storage_offset())
    result.device_base = device_base
    return result


def as_device(x):
    """A device copy of `x`: a plain copy when `x` owns its contiguous storage, a rebuilt view
    otherwise."""
    if x.is_contiguous() and x.storage_offset() == 0 and x._base is None:
        return to_device(x)
    return device_view(x)


def random(*shape, dtype=torch.float32):
    """Standard-normal values drawn in float32, rounded to `dtype`."""
    return torch.randn(shape, dtype=torch.float32).to(dtype)


@pytest.fixture(scope="module", autouse=True)
def no_leaks_in_module():
    """Every device allocation the module's tests make is freed by its end (checked once per
    module: a collection per test would cost more than the tests). Autouse: a test module opts
    in by importing it."""
    try:
        etmetal_py.synchronize()
    except etmetal_py.EtmetalError:
        pass  # an earlier module's sticky error, reported and cleared: not this module's
    gc.collect()
    before = allocator_stats()
    yield
    etmetal_py.synchronize()
    gc.collect()
    after = allocator_stats()
    assert (after.live_bytes, after.live_allocations) == (before.live_bytes, before.live_allocations)


@pytest.fixture(params=["gpu", "cpu"])
def launch_shape(request, monkeypatch):
    """Runs the test once with each launch shape forced (ETMETAL_OP_SHAPES, which ops read at
    each call): "gpu", a threadgroup cooperating on each long line or large window, and "cpu",
    a thread walking each, so both kernels of such ops are tested on whichever device runs the
    tests (each device takes its own shape by default). Returns the shape."""
    monkeypatch.setenv("ETMETAL_OP_SHAPES", request.param)
    return request.param


def assert_close_scaled(actual, expected, tolerance, same_dtype=False):
    """|actual - expected| <= tolerance * max(max |expected|, 1) everywhere, compared in float64
    (and, with same_dtype, both of one dtype)."""
    if same_dtype:
        assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    scale = max(float(expected.abs().max()), 1.0)
    torch.testing.assert_close(actual.double(), expected.double(), rtol=0, atol=tolerance * scale)


def poisoning_failure(code, *fragments):
    """Asserts a call failed (code 1) with a message containing every fragment and poisoned
    the stream (the next synchronize raises, which clears the error); returns the message."""
    message = fails(code, *fragments)
    with pytest.raises(etmetal_py.EtmetalError):
        etmetal_py.synchronize()
    return message


def compile_and_load(model, args, tmp_path, c_functions):
    """Compiles the model and checks that its generated code calls `c_functions` (the ops went
    through their C shims, not through a proxy or a decomposition)."""
    ep = etmetal_py.export(model, args)
    package = etmetal_py.aoti_compile_and_package(ep, str(tmp_path / "model.pt2"))
    with zipfile.ZipFile(package) as archive:
        sources = "".join(archive.read(name).decode("utf-8", "replace")
                          for name in archive.namelist() if name.endswith(".cpp"))
    for function in c_functions:
        assert f"{function}(" in sources, function
    return etmetal_py.aoti_load_package(package)
