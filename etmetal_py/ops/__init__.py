"""etmetal's quantized and custom ops for torch.

Importing registers ``metal::gather_qmv``, ``metal::gated_delta_rule`` and (where torchao does
not provide them) torchao's ``_linear_fp_act_{1..7}bit_weight`` / ``_pack_weight_{1..7}bit``,
each with a CPU reference kernel and a fake kernel. ``custom_ops_to_c_shims`` gives their C
declarations for AOTInductor (``etmetal_py.aoti_compile_and_package`` uses it), and
``etmetal_py.ops.quantize`` builds the packed weight layouts.
"""

from . import quantize, reference
from .c_shims import build_custom_ops_to_c_shims
from .custom_ops import LOWBIT_WIDTHS, gated_delta_rule, gather_qmv, linear_lowbit_op

# {OpOverload: [C declaration]}: pass as inductor_configs["aot_inductor.custom_ops_to_c_shims"]
# (etmetal_py.aoti_compile_and_package adds it by itself).
custom_ops_to_c_shims = build_custom_ops_to_c_shims()

__all__ = ["LOWBIT_WIDTHS", "custom_ops_to_c_shims", "gated_delta_rule", "gather_qmv",
           "linear_lowbit_op", "quantize", "reference"]
