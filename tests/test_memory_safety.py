"""A kernel that runs off its buffers must not corrupt memory outside the device allocations it
was given (CPU device): caller memory is never bound in place, and each allocation sits between
inaccessible guard zones. What such a kernel reads or writes inside its own allocations stays
undefined, as on a GPU."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import etmetal_py
from etmetal_py.kernels import compile_library

SPILL = """
#include <metal_stdlib>
using namespace metal;
kernel void spill(device float* out [[buffer(0)]], constant long& offset [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) { out[i + offset] = 7.0f; }
"""

pytestmark = pytest.mark.skipif(etmetal_py.device_kind() != "cpu",
                                reason="out-of-range kernel access is the CPU device's concern")


def test_overrun_of_a_wrapped_array_stays_out_of_the_host_heap():
    host = np.zeros(64, dtype=np.float32)
    view = host[16:32]
    spill = compile_library(SPILL).function("spill")
    spill(view, 3, threads=16)  # writes view[3:19]: three elements past its end
    np.testing.assert_array_equal(view[3:], 7.0)
    np.testing.assert_array_equal(host[:16], 0.0)
    np.testing.assert_array_equal(host[32:], 0.0)


def test_far_overrun_faults_in_the_guard_zone_instead_of_writing_elsewhere():
    """One page past the rounded allocation is the guard zone: the write faults (or, where the
    device reports kernel faults, fails) and never lands in another allocation."""
    script = textwrap.dedent(f"""
        import numpy as np, etmetal_py
        from etmetal_py import Tensor, lib
        from etmetal_py.kernels import compile_library
        spill = compile_library({SPILL!r}).function("spill")
        first = Tensor.empty([4096])  # exactly one 16 KiB page
        neighbours = [Tensor.empty([4096]) for _ in range(8)]
        for n in neighbours:
            n.write(np.zeros(4096, dtype=np.float32))
        try:
            spill(first.numpy(), 0, threads=1)  # warm the compile in-process first
            lib.aoti_torch_mps_start_encoding(spill.handle)
            lib.aoti_torch_mps_set_arg_tensor(spill.handle, 0, first.handle)
            lib.aoti_torch_mps_set_arg_int(spill.handle, 1, 4096 + 1024)
            import etmetal_py._ffi as f
            lengths = f.ffi.new("uint64_t[]", [1])
            lib.aoti_torch_mps_dispatch_array(spill.handle, lengths, 1)
            etmetal_py.synchronize()
        except etmetal_py.EtmetalError as error:
            print("kernel fault reported:", error)
        touched = sum(int((n.numpy() != 0).sum()) for n in neighbours)
        print("returned; neighbours touched:", touched)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    if result.returncode == 0:
        assert "kernel fault reported" in result.stdout, result.stdout + result.stderr
        assert "neighbours touched: 0" in result.stdout
    else:
        assert result.returncode < 0, result.stderr  # killed by the fault's signal
