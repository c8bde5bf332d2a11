"""Streams: sync-type semantics, the commit policy, sticky errors, one stream per thread."""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np

import etmetal_py
from etmetal_testing import fails
from etmetal_py import Tensor, ffi, lib

NONE, COMMIT, COMMIT_AND_WAIT, COMMIT_AND_CONTINUE, COMMIT_ADAPTIVE = range(5)


def stats():
    s = ffi.new("etmetal_stream_stats_t*")
    etmetal_py.check(lib.etmetal_stream_stats(s))
    return s


def device_copy(dst: Tensor, src: Tensor, nbytes: int):
    etmetal_py.check(lib.aoti_torch_mps_copy_buffer(ffi.cast("void*", src.data_ptr),
                                                    ffi.cast("void*", dst.data_ptr), nbytes, 0, 0))


def test_sync_types(no_leaks):
    etmetal_py.synchronize()
    src = Tensor.from_array(np.arange(256, dtype=np.float32), copy=True)
    dst = Tensor.empty([256])
    base = stats()
    committed = base.committed_buffers

    device_copy(dst, src, 1024)
    etmetal_py.check(lib.etmetal_synchronize(NONE))
    assert stats().pending_commands == 1
    assert stats().committed_buffers == committed

    etmetal_py.check(lib.etmetal_synchronize(COMMIT_ADAPTIVE))  # 1 of 40: stays open
    assert stats().pending_commands == 1

    etmetal_py.check(lib.etmetal_synchronize(COMMIT))
    assert stats().pending_commands == 0
    assert stats().committed_buffers == committed + 1

    device_copy(dst, src, 512)
    etmetal_py.check(lib.etmetal_synchronize(COMMIT_AND_CONTINUE))
    assert stats().pending_commands == 0
    assert stats().committed_buffers == committed + 2

    etmetal_py.check(lib.etmetal_synchronize(COMMIT_AND_WAIT))
    after = stats()
    assert after.completed_buffers == after.committed_buffers == committed + 2
    np.testing.assert_array_equal(dst._view(), np.arange(256, dtype=np.float32))

    fails(lib.etmetal_synchronize(7), "unknown sync type 7")
    fails(lib.etmetal_synchronize(-1), "unknown sync type")


def test_pending_bytes_count_each_buffer_once(no_leaks):
    """The open buffer's bytes count every distinct device buffer once, however often it is
    bound (34 buffers: more than the stream's first bookkeeping table holds)."""
    etmetal_py.synchronize()
    tensors = [Tensor.from_array(np.full(1024, i, np.float32), copy=True) for i in range(34)]
    device_copy(tensors[1], tensors[0], 4096)
    one_pair = stats().pending_bytes
    assert one_pair >= 2 * 4096
    device_copy(tensors[1], tensors[0], 4096)
    device_copy(tensors[0], tensors[1], 4096)
    assert stats().pending_bytes == one_pair
    # Buffers recycled from the pool may be larger than 4 KiB, so each pair's bytes are
    # measured as it is bound; binding counted buffers again adds nothing.
    for i in range(2, 34, 2):
        before = stats().pending_bytes
        device_copy(tensors[i + 1], tensors[i], 4096)
        added = stats().pending_bytes - before
        assert added >= 2 * 4096
        device_copy(tensors[i + 1], tensors[0], 4096)
        assert stats().pending_bytes == before + added
    assert stats().pending_commands == 3 + 32
    etmetal_py.synchronize()
    np.testing.assert_array_equal(tensors[33]._view(), np.zeros(1024, np.float32))
    del tensors


def test_empty_commit_is_a_no_op():
    etmetal_py.synchronize()
    before = stats().committed_buffers
    for sync in (COMMIT, COMMIT_AND_WAIT, COMMIT_ADAPTIVE, NONE):
        etmetal_py.check(lib.etmetal_synchronize(sync))
    assert stats().committed_buffers == before


def run_python(code: str, **env) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, env={**os.environ, **env}, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


POLICY_PROBE = """
    import numpy as np, etmetal_py
    from etmetal_py import Tensor, ffi, lib
    s = ffi.new("etmetal_stream_stats_t*")
    src = Tensor.from_array(np.zeros(64, np.float32), copy=True)
    dst = Tensor.empty([64])
    def copy():
        etmetal_py.check(lib.aoti_torch_mps_copy_buffer(ffi.cast("void*", src.data_ptr),
                         ffi.cast("void*", dst.data_ptr), 256, 0, 0))
    def state():
        lib.etmetal_stream_stats(s)
        return (s.pending_commands, s.committed_buffers)
    lib.etmetal_stream_stats(s)
    print(s.max_ops_per_buffer, s.max_mb_per_buffer)
    copy(); copy(); print(*state())
    lib.etmetal_synchronize(4); print(*state())
    copy(); print(*state())
    copy(); print(*state())
"""


def test_commit_policy_from_environment():
    out = run_python(POLICY_PROBE, ETMETAL_MAX_OPS_PER_BUFFER="3", ETMETAL_MAX_MB_PER_BUFFER="7")
    lines = out.split("\n")
    assert lines[0] == "3 7"
    assert lines[1] == "2 0"  # below the limit: nothing submitted
    assert lines[2] == "2 0"  # adaptive sync below the limit keeps the buffer open
    assert lines[3] == "0 1"  # the third command reached the limit: submitted on its own
    assert lines[4] == "1 1"


def test_commit_policy_bad_values_are_errors():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETMETAL_MAX_")}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(POLICY_PROBE)],
                            capture_output=True, text=True, timeout=120,
                            env={**env, "ETMETAL_MAX_OPS_PER_BUFFER": "lots"})
    assert result.returncode != 0
    assert "ETMETAL_MAX_OPS_PER_BUFFER must be an integer from 1 to" in result.stderr
    assert "not 'lots'" in result.stderr


def test_sticky_error_reported_once_by_the_next_wait():
    etmetal_py.synchronize()
    lib.aoti_torch_check(False, b"kernel_call", b"model.cpp", 42, b"index out of bounds")
    # Non-waiting sync types do not report it.
    etmetal_py.check(lib.etmetal_synchronize(COMMIT))
    message = fails(lib.etmetal_synchronize(COMMIT_AND_WAIT), "index out of bounds")
    assert "model.cpp:42" in message
    etmetal_py.check(lib.etmetal_synchronize(COMMIT_AND_WAIT))  # reported, then cleared


def test_failed_encoding_call_poisons_the_stream():
    etmetal_py.synchronize()
    bogus = ffi.cast("AOTIMetalKernelFunctionHandle", 0x10)
    fails(lib.aoti_torch_mps_start_encoding(bogus), "invalid kernel function handle")
    fails(lib.aoti_torch_mps_dispatch_single(ffi.NULL, 4), "null kernel function handle")
    # The first error wins.
    fails(lib.etmetal_synchronize(COMMIT_AND_WAIT), "aoti_torch_mps_start_encoding")
    etmetal_py.check(lib.etmetal_synchronize(COMMIT_AND_WAIT))


def test_each_thread_has_its_own_stream(no_leaks):
    etmetal_py.synchronize()
    src = Tensor.from_array(np.ones(64, np.float32), copy=True)
    dst = Tensor.empty([64])
    device_copy(dst, src, 256)
    assert stats().pending_commands == 1
    seen = {}

    def worker():
        seen["pending"] = stats().pending_commands
        lib.aoti_torch_check(False, b"f", b"x.cpp", 1, b"error on the worker thread")
        seen["code"] = lib.etmetal_synchronize(COMMIT_AND_WAIT)
        seen["message"] = etmetal_py.last_error()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["pending"] == 0
    assert seen["code"] == 1 and "error on the worker thread" in seen["message"]
    # The worker's error stayed on its stream; this thread's stream is clean.
    etmetal_py.synchronize()
    np.testing.assert_array_equal(dst.numpy(), np.ones(64, np.float32))


def test_synchronize_metal_stream_and_run_command_block(no_leaks):
    src = Tensor.from_array(np.arange(8, dtype=np.int32), copy=True)
    dst = Tensor.empty([8], np.int32)
    device_copy(dst, src, 32)
    lib.synchronize_metal_stream()
    assert stats().pending_commands == 0
    np.testing.assert_array_equal(dst._view(), np.arange(8))
