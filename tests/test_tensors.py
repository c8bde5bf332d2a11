"""Tensor handles: creation, views, storage sharing, lifetimes and bad input."""

import numpy as np
import pytest

import etmetal_py
from etmetal_testing import allocator_stats, empty, fails, new_handle_out
from etmetal_py import Tensor, ffi, lib


def get(function, handle, ctype):
    out = ffi.new(ctype)
    etmetal_py.check(function(handle, out))
    return out[0]


def test_empty_strided_metadata(no_leaks):
    h = empty([2, 3, 4], [1, 2, 6], dtype=5)
    try:
        assert get(lib.aoti_torch_get_dim, h, "int64_t*") == 3
        sizes = get(lib.aoti_torch_get_sizes, h, "int64_t**")
        strides = get(lib.aoti_torch_get_strides, h, "int64_t**")
        assert [sizes[i] for i in range(3)] == [2, 3, 4]
        assert [strides[i] for i in range(3)] == [1, 2, 6]
        assert get(lib.aoti_torch_get_numel, h, "int64_t*") == 24
        assert get(lib.aoti_torch_get_dtype, h, "int32_t*") == 5
        assert get(lib.aoti_torch_get_device_type, h, "int32_t*") == 13
        assert get(lib.aoti_torch_get_device_index, h, "int32_t*") == 0
        assert get(lib.aoti_torch_get_layout, h, "int32_t*") == 0
        assert get(lib.aoti_torch_get_storage_offset, h, "int64_t*") == 0
        assert get(lib.aoti_torch_get_storage_size, h, "int64_t*") == 24 * 2
        assert get(lib.aoti_torch_get_storage_numel, h, "int64_t*") == 24
        assert not get(lib.aoti_torch_is_contiguous, h, "bool*")
        out = ffi.new("int64_t*")
        assert lib.aoti_torch_get_size(h, 2, out) == 0 and out[0] == 4
        assert lib.aoti_torch_get_stride(h, 1, out) == 0 and out[0] == 2
        fails(lib.aoti_torch_get_size(h, 3, out), "out of range")
        data = get(lib.aoti_torch_get_data_ptr, h, "void**")
        assert lib.metal_is_device_pointer(data)
        assert int(ffi.cast("uintptr_t", data)) % 16 == 0
    finally:
        assert lib.aoti_torch_delete_tensor_object(h) == 0


def test_storage_of_overlapping_and_gapped_layouts(no_leaks):
    # Storage covers exactly what sizes and strides reach: (2-1)*10 + (3-1)*1 + 1 = 13.
    h = empty([2, 3], [10, 1], dtype=6)
    assert get(lib.aoti_torch_get_storage_size, h, "int64_t*") == 13 * 4
    lib.aoti_torch_delete_tensor_object(h)
    h = empty([4, 0], dtype=6)
    assert get(lib.aoti_torch_get_storage_size, h, "int64_t*") == 0
    assert get(lib.aoti_torch_get_numel, h, "int64_t*") == 0
    lib.aoti_torch_delete_tensor_object(h)
    scalar = empty([], dtype=4)
    assert get(lib.aoti_torch_get_numel, scalar, "int64_t*") == 1
    assert get(lib.aoti_torch_get_storage_size, scalar, "int64_t*") == 8
    lib.aoti_torch_delete_tensor_object(scalar)


def test_every_tensor_dtype(no_leaks):
    for code, size in {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 15: 2}.items():
        for device in (0, 13):
            h = empty([3], dtype=code, device=device)
            assert get(lib.aoti_torch_get_storage_size, h, "int64_t*") == 3 * size
            lib.aoti_torch_delete_tensor_object(h)


def test_views_share_storage_and_outlive_their_base(no_leaks):
    base = Tensor.from_array(np.arange(24, dtype=np.float32), copy=True)
    out = new_handle_out()
    # A 3x4 view starting at element 5, with its own strides.
    etmetal_py.check(lib.aoti_torch__reinterpret_tensor(
        base.handle, 2, ffi.new("int64_t[]", [3, 4]), ffi.new("int64_t[]", [5, 1]), 5, out))
    view = Tensor(out[0])
    assert view.storage_offset == 5
    assert view.data_ptr == base.data_ptr + 5 * 4
    # A view of the view accumulates the offset.
    etmetal_py.check(lib.aoti_torch__reinterpret_tensor(
        view.handle, 1, ffi.new("int64_t[]", [2]), ffi.new("int64_t[]", [3]), 2, out))
    view_of_view = Tensor(out[0])
    assert view_of_view.storage_offset == 7
    base.delete()  # the storage lives on in the views
    expected = np.arange(24, dtype=np.float32)
    np.testing.assert_array_equal(view.numpy(), np.lib.stride_tricks.as_strided(
        expected[5:], shape=(3, 4), strides=(20, 4)))
    np.testing.assert_array_equal(view_of_view.numpy(), expected[[7, 10]])
    # Writes through the view land in the shared storage.
    view_of_view.write(np.array([-1, -2], dtype=np.float32))
    assert view.numpy()[0, 2] == -1 and view.numpy()[1, 0] == -2


def test_reinterpret_past_the_allocation_is_refused(no_leaks):
    base = Tensor.empty([4], np.float32)
    out = new_handle_out()
    fails(lib.aoti_torch__reinterpret_tensor(base.handle, 1, ffi.new("int64_t[]", [8]),
                                             ffi.new("int64_t[]", [4096]), 0, out), "past the end")


def test_new_tensor_handle_aliases(no_leaks):
    a = Tensor.from_array(np.arange(6, dtype=np.int64).reshape(2, 3), copy=True)
    out = new_handle_out()
    etmetal_py.check(lib.aoti_torch_new_tensor_handle(a.handle, out))
    b = Tensor(out[0])
    assert b.data_ptr == a.data_ptr and b.sizes == a.sizes and b.strides == a.strides
    a.delete()
    np.testing.assert_array_equal(b.numpy(), np.arange(6).reshape(2, 3))


def test_blob_pointer_inside_allocation_shares_it(no_leaks):
    """Constants: one malloc'd blob, each constant a from_blob_v2 with an element offset."""
    for _ in range(3):  # unload and reload must work every time
        blob = ffi.new("void**")
        etmetal_py.check(lib.aoti_torch_mps_malloc(blob, 1024))
        values = np.arange(64, dtype=np.float32)
        raw = ffi.from_buffer(values)
        etmetal_py.check(lib.aoti_torch_mps_memcpy(blob[0], 0, 0, 256, ffi.cast("uint8_t*", raw)))
        handles = []
        for offset in (0, 16, 40):
            out = new_handle_out()
            etmetal_py.check(lib.aoti_torch_create_tensor_from_blob_v2(
                blob[0], 1, ffi.new("int64_t[]", [8]), ffi.new("int64_t[]", [1]), offset, 6, 13, 0,
                out, 0, ffi.NULL, 0))
            handles.append(Tensor(out[0]))
        for t, offset in zip(handles, (0, 16, 40)):
            np.testing.assert_array_equal(t.numpy(), values[offset:offset + 8])
            assert t.storage_offset == offset
        # An interior pointer resolves to the same allocation.
        interior = ffi.cast("char*", blob[0]) + 100
        assert lib.metal_is_device_pointer(interior)
        etmetal_py.check(lib.aoti_torch_mps_free(blob[0]))
        # Tensors keep the memory alive after the blob is freed.
        np.testing.assert_array_equal(handles[1].numpy(), values[16:24])
        for t in handles:
            t.delete()
        assert not lib.metal_is_device_pointer(blob[0])


def test_blob_wrapping_host_memory(no_leaks):
    values = np.arange(10, dtype=np.int32)
    t = Tensor.from_array(values)
    if etmetal_py.device_kind() == "cpu":
        assert t.data_ptr != values.ctypes.data  # the CPU device never binds caller memory
    np.testing.assert_array_equal(t.numpy(), values)
    t.delete()


def test_from_blob_in_place_declines_quietly(no_leaks, capfd):
    """etmetal_tensor_from_blob_in_place: NULL without an error for memory the device cannot use
    in place (the copy route of Tensor.from_array), a tensor inside an etmetal allocation, and
    the usual errors for bad input."""
    sizes, strides = ffi.new("int64_t[]", [4]), ffi.new("int64_t[]", [1])
    out = new_handle_out()
    host = np.arange(4, dtype=np.float32)
    if etmetal_py.device_kind() == "cpu":
        fails(lib.aoti_torch_create_tensor_from_blob(ffi.from_buffer(host), 1, sizes, strides, 0,
                                                     6, 13, 0, out), "cannot use it in place")
        capfd.readouterr()
        before = etmetal_py.last_error()
        assert lib.etmetal_tensor_from_blob_in_place(ffi.from_buffer(host), 1, sizes, strides, 0,
                                                     6, 13, 0, out) == 0
        assert out[0] == ffi.NULL
        assert etmetal_py.last_error() == before
        Tensor.from_array(host).delete()
        assert capfd.readouterr().err == ""
    blob = ffi.new("void**")
    etmetal_py.check(lib.aoti_torch_mps_malloc(blob, 64))
    etmetal_py.check(lib.etmetal_tensor_from_blob_in_place(blob[0], 1, sizes, strides, 2, 6, 13, 0,
                                                           out))
    inside = Tensor(out[0])
    assert inside.storage_offset == 2 and inside.sizes == (4,)
    inside.delete()
    etmetal_py.check(lib.aoti_torch_mps_free(blob[0]))
    fails(lib.etmetal_tensor_from_blob_in_place(ffi.from_buffer(host), 1, sizes, strides, 0, 99,
                                                13, 0, out), "dtype")
    fails(lib.etmetal_tensor_from_blob_in_place(ffi.from_buffer(host), 1, sizes, strides, 0, 6,
                                                13, 0, ffi.NULL), "ret")


def test_live_bytes_return_to_zero():
    before = allocator_stats()
    handles = [empty([1000 + i]) for i in range(20)]
    during = allocator_stats()
    assert during.live_allocations == before.live_allocations + 20
    assert during.live_bytes >= before.live_bytes + 20 * 4000
    for h in handles:
        lib.aoti_torch_delete_tensor_object(h)
    etmetal_py.synchronize()
    after = allocator_stats()
    assert (after.live_bytes, after.live_allocations) == (before.live_bytes, before.live_allocations)
    assert after.pooled_bytes > 0  # freed memory is cached for reuse


@pytest.mark.parametrize("sizes,strides,dtype,device,fragment", [
    ([2, -1], None, 6, 13, "negative size"),
    ([2, 2], [1, -1], 6, 13, "negative stride"),
    ([2], None, 99, 13, "unsupported dtype"),
    ([2], None, 23, 13, "unsupported dtype float8_e5m2"),
    ([2], None, 6, 1, "unsupported device type 1"),
    ([1 << 62, 4], None, 6, 13, "overflow"),
])
def test_empty_strided_rejects_bad_input(sizes, strides, dtype, device, fragment):
    out = new_handle_out()
    c_strides = ffi.NULL if strides is None else ffi.new("int64_t[]", strides)
    fails(lib.aoti_torch_empty_strided(len(sizes), ffi.new("int64_t[]", sizes), c_strides, dtype,
                                       device, 0, out), fragment)


def test_bad_handles_are_errors_not_crashes():
    out = ffi.new("int64_t*")
    fails(lib.aoti_torch_get_numel(ffi.NULL, out), "null tensor handle")
    h = empty([2])
    assert lib.aoti_torch_delete_tensor_object(h) == 0
    fails(lib.aoti_torch_get_numel(h, out), "invalid tensor handle")
    fails(lib.aoti_torch_delete_tensor_object(h), "invalid tensor handle")
    bogus = ffi.cast("AtenTensorHandle", 0x1234)
    fails(lib.aoti_torch_get_dim(bogus, out), "invalid tensor handle")
    # A live handle of another type is not a tensor.
    fails(lib.aoti_torch_get_dim(ffi.cast("AtenTensorHandle", ffi.new("char[64]")), out),
          "invalid tensor handle")
    t = Tensor.empty([2])
    fails(lib.aoti_torch_get_numel(t.handle, ffi.NULL), "ret_numel is null")
    fails(lib.aoti_torch_empty_strided(1, ffi.new("int64_t[]", [2]), ffi.NULL, 6, 13, 0, ffi.NULL),
          "is null")


def test_from_blob_bad_input():
    out = new_handle_out()
    fails(lib.aoti_torch_create_tensor_from_blob(ffi.NULL, 1, ffi.new("int64_t[]", [4]), ffi.NULL,
                                                 0, 6, 13, 0, out), "null data pointer")
    fails(lib.aoti_torch_create_tensor_from_blob_v2(ffi.new("float[4]"), 1,
                                                    ffi.new("int64_t[]", [4]), ffi.NULL, 0, 6, 13,
                                                    0, out, 3, ffi.NULL, 0), "layout 3")
    blob = ffi.new("void**")
    etmetal_py.check(lib.aoti_torch_mps_malloc(blob, 64))
    try:
        # 64 bytes rounds up to a page; past the page is past the allocation.
        fails(lib.aoti_torch_create_tensor_from_blob(blob[0], 1, ffi.new("int64_t[]", [1 << 20]),
                                                     ffi.NULL, 0, 6, 13, 0, out), "past the end")
    finally:
        lib.aoti_torch_mps_free(blob[0])


def test_item_reads_one_element_after_pending_work(no_leaks):
    src = Tensor.from_array(np.array([[2.75]], dtype=np.float32), copy=True)
    dst = Tensor.empty([1, 1])
    etmetal_py.check(lib.aoti_torch_copy_(dst.handle, src.handle, 0))
    for name, ctype, expected in [("float32", "float*", 2.75), ("float64", "double*", 2.75),
                                  ("int64", "int64_t*", 2), ("int8", "int8_t*", 2),
                                  ("bool", "bool*", True), ("uint8", "uint8_t*", 2)]:
        out = ffi.new(ctype)
        etmetal_py.check(getattr(lib, f"aoti_torch_item_{name}")(dst.handle, out))
        assert out[0] == expected, name
    bits = ffi.new("uint16_t*")
    etmetal_py.check(lib.aoti_torch_item_float16(dst.handle, bits))
    assert bits[0] == np.float16(2.75).view(np.uint16)
    etmetal_py.check(lib.aoti_torch_item_bfloat16(dst.handle, bits))
    assert bits[0] == 0x4030  # 2.75 in bfloat16
    many = Tensor.empty([2])
    fails(lib.aoti_torch_item_float32(many.handle, ffi.new("float*")), "2 elements")


def test_assign_tensors_aliases(no_leaks):
    a = Tensor.from_array(np.arange(4, dtype=np.int32), copy=True)
    b = Tensor.empty([7], np.float16)
    etmetal_py.check(lib.aoti_torch_assign_tensors(a.handle, b.handle))
    assert b.sizes == (4,) and b.dtype == 3 and b.data_ptr == a.data_ptr
    out = new_handle_out()
    etmetal_py.check(lib.aoti_torch_assign_tensors_out(a.handle, out))
    c = Tensor(out[0])
    a.delete()
    np.testing.assert_array_equal(c.numpy(), np.arange(4))
    np.testing.assert_array_equal(b.numpy(), np.arange(4))
