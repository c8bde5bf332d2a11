"""aoti_torch_mps_resize_, _resize_as_ and _set__source_Tensor against torch eager on the CPU:
shrinking views keep their offset, growing keeps the old elements (and every view of the
storage follows the new allocation), channels-last formats, preserve taken from a template,
set_ sharing the source's storage, and bad input leaving the tensor unchanged."""

import torch

import etmetal_py
from etmetal_py import ffi, lib
from ops_testing import as_device, no_leaks_in_module, poisoning_failure, reinterpret  # noqa: F401


def resize(t, sizes, memory_format=None):
    fmt = ffi.NULL if memory_format is None else ffi.new("int32_t*", memory_format)
    return lib.aoti_torch_mps_resize_(t.handle, ffi.new("int64_t[]", list(sizes) or [0]), len(sizes), fmt)


def metadata(t):
    return t.sizes, t.strides, t.storage_offset


def expected_metadata(x):
    return tuple(x.shape), tuple(x.stride()), x.storage_offset()


def test_resize_shrinks_and_grows_like_torch():
    base = torch.arange(12.0)
    device_base = as_device(base)
    view = reinterpret(device_base, (11,), (1,), 1)  # base[1:]
    expected = base.clone()[1:]
    etmetal_py.check(resize(view, (2, 2)))
    expected.resize_(2, 2)
    assert metadata(view) == expected_metadata(expected)
    assert torch.equal(view.torch(), expected)
    etmetal_py.check(resize(view, (4, 5)))  # 1 + 20 elements: the 12-element storage grows
    expected.resize_(4, 5)
    assert metadata(view) == expected_metadata(expected)
    assert torch.equal(view.torch().flatten()[:11], expected.flatten()[:11])  # the old elements stay
    # The base tensor shares the storage: it sees the grown allocation, its own view unchanged.
    assert device_base.data_ptr == view.data_ptr - 4
    assert torch.equal(device_base.torch(), base)
    for sizes, fmt in (((2, 3, 4, 5), 2), ((1, 2, 3, 4, 5), 3), ((0, 7), 0), ((), None)):
        etmetal_py.check(resize(view, sizes, fmt))
        memory_format = {2: torch.channels_last, 3: torch.channels_last_3d}.get(fmt, torch.contiguous_format)
        expected.resize_(sizes, memory_format=memory_format)
        assert metadata(view) == expected_metadata(expected)


def test_resize_as_and_set_like_torch():
    template = torch.zeros(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    t, device_template = as_device(torch.zeros(3)), as_device(template)
    for fmt in (None, 1, 0):
        etmetal_py.check(lib.aoti_torch_mps_resize_as_(t.handle, device_template.handle,
                                                       ffi.NULL if fmt is None else ffi.new("int32_t*", fmt)))
        expected = torch.zeros(3)
        memory_format = {1: torch.preserve_format, 0: torch.contiguous_format}.get(fmt)
        expected.resize_as_(template, memory_format=memory_format)
        assert metadata(t) == expected_metadata(expected)
    source_base = as_device(torch.arange(10.0))
    source = reinterpret(source_base, (3, 2), (1, 3), 2)
    etmetal_py.check(lib.aoti_torch_mps_set__source_Tensor(t.handle, source.handle))
    assert metadata(t) == metadata(source) and t.data_ptr == source.data_ptr
    assert torch.equal(t.torch(), torch.arange(10.0).as_strided((3, 2), (1, 3), 2))


def test_bad_input_leaves_the_tensor_unchanged():
    t = as_device(torch.arange(6.0).reshape(2, 3))
    before = metadata(t)
    poisoning_failure(resize(t, (2, -1)), "aoti_torch_mps_resize_", "negative dimension -1")
    poisoning_failure(resize(t, (2, 3), 1), "Unsupported memory formatPreserve")
    poisoning_failure(resize(t, (6,), 2), "required rank 4 tensor to use channels_last format")
    other = as_device(torch.arange(3))
    poisoning_failure(lib.aoti_torch_mps_set__source_Tensor(t.handle, other.handle),
                      "aoti_torch_mps_set__source_Tensor", "Could not set tensor of type int64 to a tensor of type float32")
    assert metadata(t) == before and torch.equal(t.torch(), torch.arange(6.0).reshape(2, 3))
