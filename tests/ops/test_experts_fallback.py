"""aoti_torch_mps_grouped_mm_fallback, the C function of transformers' custom op
transformers::grouped_mm_fallback (its MoE experts path when torch._grouped_mm cannot take the
weights, which is every dtype but bfloat16 on the compile route), against the op's definition
computed with torch eager; and its registration as a C shim on the compile route. The models
that call it (Mixtral, Qwen2-MoE) run in the slow real-model sweep."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from etmetal_py.aoti.compile import foreign_op_c_shims
from ops_testing import as_device, assert_close_scaled, no_leaks_in_module, poisoning_failure  # noqa: F401


def reference(x, weight, offs):
    """transformers' definition: rows start..end of x (sorted by expert) times weight[e]."""
    out = torch.zeros(x.shape[0], weight.shape[2], dtype=torch.float64)
    start = 0
    for expert, end in enumerate(offs.tolist()):
        out[start:end] = x[start:end].double() @ weight[expert].double()
        start = end
    return out


def call(x, weight, offs):
    handles = [as_device(t) for t in (x, weight, offs)]
    r0 = ffi.new("AtenTensorHandle*")
    return lib.aoti_torch_mps_grouped_mm_fallback(*(h.handle for h in handles), r0), r0


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.float16, 3e-3),
                                              (torch.bfloat16, 2e-2)], ids=str)
def test_matches_the_ops_definition(dtype, tolerance):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20, 16, generator=g).to(dtype)
    weight_t = torch.randn(4, 24, 16, generator=g).to(dtype)
    weight = weight_t.transpose(-2, -1)  # [E, K, N] as a strided view, as transformers passes it
    for ends in ([3, 3, 12, 20], [0, 5, 5, 17], [20, 20, 20, 20]):  # empty groups; rows past the end
        offs = torch.tensor(ends, dtype=torch.int32)
        code, r0 = call(x, weight, offs)
        assert code == 0, etmetal_py.last_error()
        got = Tensor(r0[0]).torch()
        assert got.dtype == dtype and got.shape == (20, 24)
        assert_close_scaled(got.double(), reference(x, weight, offs), tolerance)
        assert torch.equal(got[ends[-1]:], torch.zeros_like(got[ends[-1]:]))


def test_bad_input():
    x, weight = torch.randn(4, 8), torch.randn(2, 8, 3)
    message = poisoning_failure(call(x, weight[0], torch.tensor([2, 4], dtype=torch.int32))[0])
    assert message.endswith("aoti_torch_mps_grouped_mm_fallback: grouped_mm_fallback: input must be 2-D and "
                            "weight 3-D, got 2-D and 2-D"), message
    poisoning_failure(call(x, weight, torch.tensor([2, 4], dtype=torch.int64))[0], "int32")
    poisoning_failure(call(x, torch.randn(2, 5, 3), torch.tensor([2, 4], dtype=torch.int32))[0],
                      "aoti_torch_mps_grouped_mm_fallback")


def test_the_op_gets_its_c_shim_once_it_is_registered():
    if not torch._C._dispatch_has_kernel("transformers::grouped_mm_fallback"):
        # What transformers registers (transformers.integrations.moe), for a host without it.
        @torch.library.custom_op("transformers::grouped_mm_fallback", mutates_args=())
        def grouped_mm_fallback(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
            return reference(input, weight, offs).to(input.dtype)
    shims = foreign_op_c_shims()
    declaration, = shims[torch.ops.transformers.grouped_mm_fallback.default]
    assert declaration.startswith("AOTITorchError aoti_torch_mps_grouped_mm_fallback(AtenTensorHandle input")
