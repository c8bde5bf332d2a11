"""Models that use etmetal's custom ops, exported with etmetal_py.export, compiled by
AOTInductor for "mps" (the ops reach the model .so through custom_ops_to_c_shims) and run
through libetmetal, against torch eager on CPU (the ops' reference kernels):

- a mixture-of-experts block: router, top-k routing, gather_qmv for the gate, up and down
  projections of 4-bit experts, weighted combine;
- a GatedDeltaNet-style block: 4-bit torchao linear projections, L2-normalized q / k, decay
  and update gates, gated_delta_rule over the sequence, output projection; the recurrent state
  comes in as an input and its final value is an output;
- (slow) the GatedDeltaNet block in bfloat16, and torch's own _weight_int4pack_mm /
  _weight_int8pack_mm fallbacks.

Tolerances relative to the output's scale: float32 models 1e-4 (reductions of a few hundred
terms, orders of summation differ); the bfloat16 block 3e-2."""

import pytest
import torch
import torch.nn.functional as F

import etmetal_py
from etmetal_py.ops import quantize, reference
from ops_testing import assert_close_scaled, compile_and_load

GROUP_SIZE = 32


def close(actual, expected, tolerance=1e-4):
    assert_close_scaled(actual, expected, tolerance, same_dtype=True)


class MoEBlock(torch.nn.Module):
    """Top-k mixture of SwiGLU experts with 4-bit affine expert weights."""

    def __init__(self, dim=64, hidden=96, experts=4, top_k=2, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.top_k = top_k
        self.router = torch.nn.Parameter(torch.randn(experts, dim, generator=g) / dim ** 0.5)
        for name, shape in (("gate", (experts, hidden, dim)), ("up", (experts, hidden, dim)),
                            ("down", (experts, dim, hidden))):
            w, s, z = quantize.quantize_experts_4bit(
                torch.randn(*shape, generator=g) / shape[-1] ** 0.5, GROUP_SIZE)
            self.register_buffer(f"{name}_w", w)
            self.register_buffer(f"{name}_s", s)
            self.register_buffer(f"{name}_z", z)

    def route(self, x):
        """(expert index, weight) per token and slot: k rounds of argmax over the router's
        softmax (generated kernels, no sort fallback), weights renormalized over the k."""
        probs = torch.softmax((x[:, None, :] * self.router[None]).sum(-1), dim=-1)
        indices, weights = [], []
        remaining = probs
        for _ in range(self.top_k):
            choice = remaining.argmax(dim=-1, keepdim=True)
            indices.append(choice)
            weights.append(probs.gather(-1, choice))
            remaining = remaining.scatter(-1, choice, -1.0)
        weights = torch.cat(weights, -1)
        return torch.cat(indices, -1), weights / weights.sum(-1, keepdim=True)

    def experts(self, name, x, indices):
        return torch.ops.metal.gather_qmv(x, getattr(self, f"{name}_w"), getattr(self, f"{name}_s"),
                                          getattr(self, f"{name}_z"), indices, GROUP_SIZE)

    def forward(self, x):
        tokens, dim = x.shape
        indices, weights = self.route(x)
        flat = indices.reshape(-1)
        xr = x[:, None, :].expand(tokens, self.top_k, dim).reshape(-1, dim)
        hidden = F.silu(self.experts("gate", xr, flat)) * self.experts("up", xr, flat)
        out = self.experts("down", hidden, flat).reshape(tokens, self.top_k, dim)
        return (out * weights[..., None]).sum(1)


class GatedDeltaNetBlock(torch.nn.Module):
    def __init__(self, dim=64, key_heads=1, value_heads=2, key_dim=32, value_dim=32, seed=0,
                 dtype=torch.float32):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.dtype = dtype
        self.shape = (key_heads, value_heads, key_dim, value_dim)
        outputs = {"q": key_heads * key_dim, "k": key_heads * key_dim, "v": value_heads * value_dim,
                   "a": value_heads, "b": value_heads}
        for name, rows in outputs.items():
            self._quantized(name, torch.randn(rows, dim, generator=g) / dim ** 0.5)
        self._quantized("o", torch.randn(dim, value_heads * value_dim, generator=g) / dim ** 0.5)
        self.A = torch.nn.Parameter((torch.rand(value_heads, generator=g) + 0.5).to(dtype))
        self.dt_bias = torch.nn.Parameter((torch.randn(value_heads, generator=g) * 0.1).to(dtype))

    def _quantized(self, name, w):
        b, s, z = quantize.quantize_lowbit(w, 4, GROUP_SIZE, self.dtype)
        self.register_buffer(f"{name}_b", b)
        self.register_buffer(f"{name}_s", s)
        self.register_buffer(f"{name}_z", z)

    def linear(self, name, x):
        return torch.ops.torchao._linear_fp_act_4bit_weight(
            x, getattr(self, f"{name}_b"), GROUP_SIZE, getattr(self, f"{name}_s"),
            getattr(self, f"{name}_z"))

    def forward(self, x, state):
        B, T, D = x.shape
        Hk, Hv, Dk, Dv = self.shape
        flat = x.reshape(B * T, D).to(self.dtype)
        q = F.normalize(self.linear("q", flat).reshape(B, T, Hk, Dk), dim=-1)
        k = F.normalize(self.linear("k", flat).reshape(B, T, Hk, Dk), dim=-1)
        v = self.linear("v", flat).reshape(B, T, Hv, Dv)
        decay = torch.exp(-self.A * F.softplus(self.linear("a", flat) + self.dt_bias))
        beta = torch.sigmoid(self.linear("b", flat))
        new_state = state.clone()
        y = torch.ops.metal.gated_delta_rule(q, k, v, decay.reshape(B, T, Hv),
                                             beta.reshape(B, T, Hv), new_state)
        out = self.linear("o", y.reshape(B * T, Hv * Dv)).reshape(B, T, D)
        return out.float(), new_state


def test_c_shims_name_exported_functions():
    """Every C-shim declaration names a function libetmetal exports with that many
    parameters, and compile's hook picks the dictionary up."""
    shims = etmetal_py.ops.custom_ops_to_c_shims
    assert {str(op) for op in shims} >= {"metal.gather_qmv.default", "metal.gated_delta_rule.default",
                                         "torchao._linear_fp_act_4bit_weight.default"}
    for declarations in shims.values():
        (declaration,) = declarations
        name = declaration.split("(")[0].split()[-1]
        c_type = etmetal_py.ffi.typeof(getattr(etmetal_py.lib, name))
        assert len(c_type.args) == declaration.count(",") + 1
    from etmetal_py.aoti.aten_shims import aten_op_c_shims
    from etmetal_py.aoti.compile import build_inductor_configs, foreign_op_c_shims

    configs = build_inductor_configs(None, external_weights=False)
    by_name = {str(op): declarations for op, declarations in shims.items()}
    # Plus the foreign ops (transformers' experts op) another test may have registered.
    by_name.update({str(op): declarations for op, declarations in foreign_op_c_shims().items()})
    # Plus libetmetal's aten ops that torch has no C shim for.
    by_name.update({str(op): declarations for op, declarations in aten_op_c_shims().items()})
    assert {str(op): declarations for op, declarations
            in configs["aot_inductor.custom_ops_to_c_shims"].items()} == by_name


def _define_scale_op() -> torch._ops.OpOverload:
    @torch.library.custom_op("etmetal_test::scale_rows", mutates_args=())
    def scale_rows(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    return torch.ops.etmetal_test.scale_rows.default


def test_c_shims_follow_an_op_defined_again():
    # ExecuTorch's Metal backend defines metal::gather_qmv and metal::gated_delta_rule as
    # etmetal does; each definition makes new OpOverload objects, and Inductor finds a C shim
    # only under the object registered when it compiles.
    from etmetal_py.aoti.compile import build_inductor_configs

    stale = _define_scale_op()
    declaration = "AOTITorchError aoti_torch_mps_scale_rows(AtenTensorHandle x, AtenTensorHandle* ret)"
    _define_scale_op()
    current = torch.ops.etmetal_test.scale_rows.default
    assert current is not stale
    configs = build_inductor_configs({"aot_inductor.custom_ops_to_c_shims": {stale: [declaration]}},
                                     external_weights=False)
    shims = configs["aot_inductor.custom_ops_to_c_shims"]
    assert shims[current] == [declaration]
    assert stale not in shims
    assert torch.ops.metal.gather_qmv.default in shims


@pytest.mark.slow  # ~20 s compile; the ops themselves are tested in tests/ops
def test_moe_block_end_to_end(tmp_path):
    torch.manual_seed(0)
    model = MoEBlock()
    x = torch.randn(5, 64)
    with torch.no_grad():
        expected = model(x)
    runner = compile_and_load(model, (x,), tmp_path, ["aoti_torch_mps_gather_qmv"])
    close(runner(x), expected)
    x2 = torch.randn(5, 64)
    with torch.no_grad():
        close(runner(x2), model(x2))


@pytest.mark.slow  # ~17 s compile; the op itself is tested in tests/ops
def test_gated_delta_net_block_end_to_end(tmp_path):
    torch.manual_seed(0)
    model = GatedDeltaNetBlock()
    x = torch.randn(2, 6, 64)
    state = torch.randn(2, 2, 32, 32) * 0.1
    with torch.no_grad():
        expected_out, expected_state = model(x, state)
    runner = compile_and_load(model, (x, state), tmp_path,
                              ["aoti_torch_mps_gated_delta_rule",
                               "aoti_torch_mps__linear_fp_act_4bit_weight"])
    out, new_state = runner(x, state)
    close(out, expected_out)
    close(new_state, expected_state)
    # The input state is not modified; feeding the new state continues the sequence.
    assert not torch.equal(new_state, state)
    with torch.no_grad():
        expected_next, _ = model(x, expected_state)
    close(runner(x, new_state)[0], expected_next)


@pytest.mark.slow
def test_gated_delta_net_block_bfloat16(tmp_path):
    """The same block in bfloat16 (float32 state): eager rounds after every op while the
    compiled kernels keep float32 inside fused ops, so 3e-2 relative to the output scale."""
    torch.manual_seed(0)
    model = GatedDeltaNetBlock(dtype=torch.bfloat16)
    x = torch.randn(1, 5, 64)
    state = torch.randn(1, 2, 32, 32) * 0.1
    with torch.no_grad():
        expected_out, expected_state = model(x, state)
    runner = compile_and_load(model, (x, state), tmp_path, ["aoti_torch_mps_gated_delta_rule"])
    out, new_state = runner(x, state)
    close(out, expected_out, 3e-2)
    close(new_state, expected_state, 3e-2)


class TorchQuantizedLinears(torch.nn.Module):
    """torch's own weight-quantized matmuls (MPS int4pack layout, int8pack): Inductor calls
    torch's fallbacks aoti_torch_mps__weight_int{4,8}pack_mm, which libetmetal provides."""

    def __init__(self, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        mat2, sz = quantize.quantize_int4pack(torch.randn(64, 128, generator=g), GROUP_SIZE)
        q8, s8 = quantize.quantize_int8pack(torch.randn(32, 64, generator=g))
        self.register_buffer("mat2", mat2)
        self.register_buffer("sz", sz)
        self.register_buffer("q8", q8)
        self.register_buffer("s8", s8)

    def forward(self, x):
        h = torch.ops.aten._weight_int4pack_mm(x, self.mat2, GROUP_SIZE, self.sz)
        return torch.ops.aten._weight_int8pack_mm(torch.relu(h), self.q8, self.s8)


@pytest.mark.slow
def test_torch_quantized_fallbacks_end_to_end(tmp_path):
    model = TorchQuantizedLinears()
    x = torch.randn(3, 128)
    # aten._weight_int4pack_mm has no CPU kernel for the MPS layout: the reference dequantizes.
    hidden = reference.weight_int4pack_mm(x, model.mat2, GROUP_SIZE, model.sz)
    expected = reference.weight_int8pack_mm(torch.relu(hidden), model.q8, model.s8)
    runner = compile_and_load(model, (x,), tmp_path, ["aoti_torch_mps__weight_int4pack_mm",
                                                      "aoti_torch_mps__weight_int8pack_mm"])
    close(runner(x), expected)
