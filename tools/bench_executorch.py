"""Run overhead of the ExecuTorch path vs etmetal's own loader, on the same model and inputs.

    python tools/bench_executorch.py [--repeat 200] [--models tiny_mlp decoder_block]

Each model is compiled twice, with the Inductor options MetalBackend uses: as a `.pt2` package
(etmetal_py.aoti_compile_and_package, run with aoti_load_package) and as a Metal `.pte`
(etmetal_py.executorch.export_pte, run by ExecuTorch's runtime through libetmetal_executorch).
Latency is per call as a user sees it (inputs in, synchronized outputs back as CPU tensors);
the ratio is the ExecuTorch median / the aoti_load_package median, both measured in this run.
The two model libraries are not identical (ExecuTorch lowers through its edge dialect and
decomposes linear layers first), so for large models the ratio also holds codegen differences;
a small model shows the per-call overhead itself.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import etmetal_py  # noqa: E402
from etmetal_py.aoti import aoti_compile_and_package, aoti_load_package, export  # noqa: E402
from etmetal_py.demo import DecoderBlock  # noqa: E402
from etmetal_py.executorch import export_pte, register_backend  # noqa: E402
from bench_models import median_seconds  # noqa: E402  (tools/ is this script's directory)


class TinyMlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(64, 128)
        self.down = torch.nn.Linear(128, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


MODELS = {
    "tiny_mlp": (TinyMlp, lambda: (torch.randn(4, 64),)),
    "decoder_block": (DecoderBlock, lambda: (torch.randint(0, 256, (2, 16)),)),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args()
    register_backend()
    from executorch.runtime import Runtime

    print(f"device: {etmetal_py.device_name()} ({etmetal_py.device_kind()}), "
          f"median of {args.repeat} calls")
    print(f"{'model':<16}{'aoti_load_package':>20}{'ExecuTorch':>14}{'ratio':>8}")
    with tempfile.TemporaryDirectory(prefix="etmetal-bench-") as work:
        for name in args.models:
            build, make_inputs = MODELS[name]
            torch.manual_seed(0)
            model = build().eval()
            inputs = make_inputs()
            # The Inductor options MetalBackend compiles with, so both paths run like kernels.
            package = aoti_compile_and_package(
                export(model, inputs), os.path.join(work, name + ".pt2"),
                {"max_autotune": True, "padding_stride_threshold": float("inf")},
                external_weights=True)
            program = export_pte(model, inputs, os.path.join(work, name + ".pte"))
            runner = aoti_load_package(package)
            method = Runtime.get().load_program(program).load_method("forward")
            expected = runner(*inputs)
            (actual,) = method.execute(list(inputs))
            torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
            # Alternate the two paths so load drift on the machine hits both alike.
            aoti_times, et_times = [], []
            for _ in range(5):
                aoti_times.append(median_seconds(lambda: runner(*inputs), args.repeat // 5, 5))
                et_times.append(median_seconds(lambda: method.execute(list(inputs)),
                                               args.repeat // 5, 5))
            aoti, et = statistics.median(aoti_times), statistics.median(et_times)
            print(f"{name:<16}{aoti * 1e3:>17.3f} ms{et * 1e3:>11.3f} ms{et / aoti:>8.2f}")
            runner.close()
            del method
    return 0


if __name__ == "__main__":
    sys.exit(main())
