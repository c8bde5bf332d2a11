"""Runs an Inductor-style MSL reduction that includes torch's c10/metal headers through the CPU
device. Run by test_runtime_kernels.py in a fresh process whose ETMETAL_CXXFLAGS adds torch's
include directory (the kernel compiler reads its flags once per process)."""

import numpy as np
import torch

from etmetal_py.kernels import compile_library

SOURCE = r"""
#include <c10/metal/random.h>
#include <c10/metal/special_math.h>
#include <c10/metal/utils.h>
#include <c10/metal/reduction_utils.h>
#include <c10/metal/error.h>
kernel void generated_kernel(
    device float* out_ptr0,
    device long* out_ptr1,
    constant float* in_ptr0,
    constant long* in_ptr1,
    uint2 thread_pos [[thread_position_in_grid]],
    uint2 group_pos [[thread_position_in_threadgroup]]
) {
    auto xindex = thread_pos.x;
    auto r0_index = thread_pos.y;
    threadgroup float tmp_acc_0[32];
    threadgroup long tmp_acc_1[32];
    auto tmp0 = in_ptr0[r0_index + 100*xindex];
    auto tmp1 = c10::metal::erfinv(tmp0 * 0.5);
    auto tmp2 = c10::metal::threadgroup_sum(tmp_acc_0, tmp1, group_pos.y, 100);
    auto tmp3 = c10::metal::threadgroup_sum(tmp_acc_1, in_ptr1[r0_index + 100*xindex], group_pos.y, 100);
    if (group_pos.y == 0) {
        out_ptr0[xindex] = static_cast<float>(tmp2);
        out_ptr1[xindex] = tmp3;
    }
}
"""

x = np.random.default_rng(0).uniform(-1, 1, (3, 100)).astype(np.float32)
wide = ((1 << 40) + np.arange(300, dtype=np.int64) * 977).reshape(3, 100)
sums = np.zeros(3, np.float32)
wide_sums = np.zeros(3, np.int64)
# Groups of 100 threads: three full simdgroups and one of 4 lanes, whose 28 missing lanes the
# int64 simd_sum's shuffle_and_fill_down must read as zero.
with compile_library(SOURCE) as library:
    library.function("generated_kernel")(sums, wide_sums, x, wide, threads=(3, 100), group=(1, 100))
reference = torch.special.erfinv(torch.from_numpy(x) * 0.5).sum(1).numpy()
np.testing.assert_allclose(sums, reference, rtol=2e-6, atol=1e-6)
assert wide_sums.tolist() == wide.sum(axis=1).tolist(), (wide_sums, wide.sum(axis=1))
print("ok")
