"""Two threads hammering allocation, views, copies and frees at once."""

import threading

import numpy as np

import etmetal_py
from etmetal_testing import new_handle_out
from etmetal_py import Tensor, ffi, lib


def hammer(seed: int, rounds: int, errors: list):
    rng = np.random.default_rng(seed)
    try:
        for _ in range(rounds):
            n = int(rng.integers(1, 5000))
            values = rng.standard_normal(n).astype(np.float32)
            a = Tensor.from_array(values, copy=True)
            b = Tensor.empty([n], np.float16)
            etmetal_py.check(lib.aoti_torch_copy_(b.handle, a.handle, 0))
            out = new_handle_out()
            etmetal_py.check(lib.aoti_torch_clone(b.handle, out))
            c = Tensor(out[0])
            raw = lib.metal_allocate_buffer(n * 4)
            etmetal_py.check(lib.aoti_torch_mps_copy_buffer(ffi.cast("void*", a.data_ptr), raw,
                                                            n * 4, 0, 0))
            etmetal_py.synchronize()
            np.testing.assert_array_equal(c.numpy(), values.astype(np.float16))
            np.testing.assert_array_equal(np.frombuffer(ffi.buffer(raw, n * 4), np.float32), values)
            lib.metal_deallocate_buffer(raw)
            for t in (a, b, c):
                t.delete()
    except Exception as error:  # reported by the main thread
        errors.append(error)


def test_two_threads_allocate_and_copy_concurrently(no_leaks):
    errors = []
    threads = [threading.Thread(target=hammer, args=(seed, 150, errors)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
