"""ExecuTorch's metal_* buffer functions and the aoti_torch_mps_* memory functions."""

import numpy as np

import etmetal_py
from etmetal_testing import allocator_stats, fails
from etmetal_py import ffi, lib


def test_allocate_copy_free(no_leaks):
    n = 4096
    device = lib.metal_allocate_buffer(n)
    assert device != ffi.NULL and lib.metal_is_device_pointer(device)
    assert lib.metal_is_device_pointer(ffi.cast("char*", device) + n - 1)
    host = np.arange(n, dtype=np.uint8)
    back = np.zeros(n, dtype=np.uint8)
    assert lib.metal_copy_memory(device, ffi.from_buffer(host), n, False, True) == 0
    assert lib.metal_copy_memory(ffi.from_buffer(back), device, n, True, False) == 0
    np.testing.assert_array_equal(back, host)
    lib.metal_deallocate_buffer(device)
    assert not lib.metal_is_device_pointer(device)
    assert lib.metal_allocate_buffer(0) == ffi.NULL
    assert lib.metal_allocate_buffer(-5) == ffi.NULL
    assert "negative" in etmetal_py.last_error()
    lib.metal_deallocate_buffer(ffi.NULL)


def test_copy_memory_checks_device_claims():
    host = np.zeros(16, dtype=np.uint8)
    other = np.zeros(16, dtype=np.uint8)
    assert lib.metal_copy_memory(ffi.from_buffer(other), ffi.from_buffer(host), 16, True, False) == -1
    assert "not device memory" in etmetal_py.last_error()
    device = lib.metal_allocate_buffer(64)
    try:
        # 64 bytes round up to one 16 KiB page; copying 32 KiB would run past it.
        big = np.zeros(32768, dtype=np.uint8)
        assert lib.metal_copy_memory(ffi.from_buffer(big), device, 32768, True, False) == -1
        assert "past the end" in etmetal_py.last_error()
    finally:
        lib.metal_deallocate_buffer(device)


def test_deallocate_unknown_pointer_is_reported():
    lib.metal_deallocate_buffer(ffi.cast("void*", 0x1000))
    assert "is not an allocation" in etmetal_py.last_error()


def test_buffer_nocopy_maps_host_memory():
    host = np.arange(32, dtype=np.float32)
    pointer = ffi.cast("void*", host.ctypes.data)
    assert not lib.metal_is_device_pointer(pointer)
    usable = lib.metal_buffer_nocopy(pointer, host.nbytes, True)
    if etmetal_py.device_kind() == "cpu" or host.ctypes.data % 16384:
        # Metal maps page-aligned memory only; the CPU device never maps caller memory.
        assert not usable
        assert not lib.metal_is_device_pointer(pointer)
        return
    assert usable
    assert lib.metal_is_device_pointer(ffi.cast("char*", pointer) + 64)
    out = ffi.new("AtenTensorHandle*")
    etmetal_py.check(lib.aoti_torch_create_tensor_from_blob(
        ffi.cast("char*", pointer) + 16, 1, ffi.new("int64_t[]", [4]), ffi.NULL, 0, 6, 13, 0, out))
    t = etmetal_py.Tensor(out[0])
    np.testing.assert_array_equal(t.numpy(), host[4:8])
    lib.metal_deallocate_buffer(pointer)  # unmaps once the tensor, which uses it, is gone
    assert lib.metal_is_device_pointer(pointer)
    t.delete()
    assert not lib.metal_is_device_pointer(pointer)
    assert not lib.metal_buffer_nocopy(ffi.NULL, 16, True)


def test_cleanup_releases_the_pool(no_leaks):
    pointers = [lib.metal_allocate_buffer(100000) for _ in range(4)]
    for p in pointers:
        lib.metal_deallocate_buffer(p)
    assert allocator_stats().pooled_bytes > 0
    lib.metal_cleanup_resources()
    assert allocator_stats().pooled_bytes == 0


def test_pool_reuses_freed_memory():
    first = lib.metal_allocate_buffer(50000)
    address = int(ffi.cast("uintptr_t", first))
    lib.metal_deallocate_buffer(first)
    second = lib.metal_allocate_buffer(50000)
    try:
        assert int(ffi.cast("uintptr_t", second)) == address
    finally:
        lib.metal_deallocate_buffer(second)


def test_mps_malloc_memcpy_copy_buffer_free(no_leaks):
    a, b = ffi.new("void**"), ffi.new("void**")
    etmetal_py.check(lib.aoti_torch_mps_malloc(a, 256))
    etmetal_py.check(lib.aoti_torch_mps_malloc(b, 256))
    constants = np.arange(64, dtype=np.uint8)
    start = ffi.cast("uint8_t*", ffi.from_buffer(constants))
    # constants[8:24] -> a[100:116]
    etmetal_py.check(lib.aoti_torch_mps_memcpy(a[0], 100, 8, 16, start))
    # a[100:116] -> b[4:20], ordered on the stream
    etmetal_py.check(lib.aoti_torch_mps_copy_buffer(a[0], b[0], 16, 100, 4))
    etmetal_py.synchronize()
    np.testing.assert_array_equal(np.frombuffer(ffi.buffer(ffi.cast("char*", b[0]) + 4, 16), np.uint8),
                                  constants[8:24])
    fails(lib.aoti_torch_mps_memcpy(a[0], 1 << 20, 0, 16, start), "past the end")
    fails(lib.aoti_torch_mps_copy_buffer(a[0], ffi.cast("void*", 0x40), 16, 0, 0),
          "not inside a live device allocation")
    lib.etmetal_synchronize(2)  # clear the sticky error of the failed encoding call
    for pointer in (a[0], b[0]):
        etmetal_py.check(lib.aoti_torch_mps_free(pointer))
    fails(lib.aoti_torch_mps_free(a[0]), "was not returned by aoti_torch_mps_malloc")
    zero = ffi.new("void**")
    etmetal_py.check(lib.aoti_torch_mps_malloc(zero, 0))
    assert zero[0] == ffi.NULL
    etmetal_py.check(lib.aoti_torch_mps_free(ffi.NULL))
