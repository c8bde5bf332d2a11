"""Compiled models run through libetmetal on the default device, against torch eager on CPU."""

import re
import zipfile

import pytest
import torch

from aoti_models import CASES
from aoti_testing import assert_outputs_close, load_runner, require_shader_compiler

STATIC_CASES = [pytest.param(name, marks=[pytest.mark.slow] if case.slow else [])
                for name, case in CASES.items() if case.dynamic_shapes is None]


@pytest.mark.parametrize("name", STATIC_CASES)
def test_matches_torch_eager(packages, name):
    require_shader_compiler()
    compiled = packages.get(name)
    with load_runner(compiled.path) as runner:
        for seed in (1, 2):
            inputs = compiled.inputs(seed)
            assert_outputs_close(runner(*inputs), compiled.expected(inputs),
                                 compiled.case.atol, compiled.case.rtol)


def test_softmax_with_dynamic_batch(packages):
    require_shader_compiler()
    compiled = packages.get("softmax_dynamic")
    with load_runner(compiled.path) as runner:
        for batch in (1, 5, 64):
            x = torch.randn(batch, 1000, generator=torch.Generator().manual_seed(batch))
            assert_outputs_close(runner(x), compiled.expected((x,)), 1e-5, 1e-4)


def test_numpy_inputs_are_accepted(packages):
    require_shader_compiler()
    compiled = packages.get("pointwise")
    x, y = compiled.inputs(3)
    with load_runner(compiled.path) as runner:
        assert_outputs_close(runner(x.numpy(), y.numpy()), compiled.expected((x, y)), 1e-4, 1e-4)


def test_weights_in_blob_and_in_so_give_the_same_results(packages):
    require_shader_compiler()
    in_so, in_blob = packages.get("weights_in_so"), packages.get("weights_in_blob")
    x = in_so.inputs(4)[0]
    with load_runner(in_so.path) as first, load_runner(in_blob.path) as second:
        assert torch.equal(first(x), second(x))
        assert_outputs_close(second(x), in_blob.expected((x,)), 1e-5, 1e-5)


def test_inputs_get_the_strides_the_model_was_compiled_for(packages):
    require_shader_compiler()
    compiled = packages.get("channels_last_input")
    image = compiled.inputs(6)[0]
    with load_runner(compiled.path) as runner:
        assert runner.input_signature[0]["strides"] == list(image.stride())
        contiguous = image.contiguous()
        assert_outputs_close(runner(contiguous), compiled.expected((contiguous,)), 1e-5, 1e-5)


@pytest.mark.slow
def test_convolutions_take_their_weights_as_stored(packages):
    # With Inductor's channels-last layout optimization every run copied each convolution
    # weight into a permuted buffer first; etmetal compiles without it.
    compiled = packages.get("conv_batchnorm")
    with zipfile.ZipFile(compiled.path) as archive:
        wrapper = next(archive.read(name).decode() for name in archive.namelist()
                       if name.endswith(".wrapper.cpp"))
    weights = re.findall(r"aoti_torch_mps_convolution\(\w+, (\w+),", wrapper)
    assert len(weights) == 3
    assert not [name for name in weights if re.fullmatch(r"buf\d+", name)], weights
