#!/usr/bin/env python3
"""Real-model sweep: architectures nobody here wrote, built from small transformers configs
with random weights, each exported, compiled and loaded through etmetal and run on the
default device against torch eager on CPU.

    python3 tools/sweep_models.py                  # every model, a table
    python3 tools/sweep_models.py --models llama gpt2 --json sweep.json
    python3 tools/sweep_models.py --list

Each model runs in its own child process (a crash or an abort is a result, not the end of
the sweep). Per model it records: compiled?, loaded?, the largest absolute and relative
error against eager over two input draws, the fallback functions (`aoti_torch_mps_*` beyond
the generated-kernel ones, and shim.h fallbacks) the model library imports, and the error
of the first step that failed. `dynamic` models are exported with a dynamic sequence length
and run at two lengths other than the example's.

transformers is a sweep-only dependency (`pip install transformers`); torchvision is not
used: its PyPI wheels for Linux link CUDA libraries that a CPU-only torch does not ship.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass, field
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

@dataclass
class Spec:
    """One architecture: `build()` gives (model, input maker); `seq` is the example length."""
    name: str
    build: Callable
    dynamic: bool = False
    tol: float = 1e-4


@dataclass
class Result:
    name: str
    compiled: bool = False
    loaded: bool = False
    matched: bool = False
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    fallbacks: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


def _first_output(model):
    import torch

    class FirstOutput(torch.nn.Module):
        """A transformers model returning one tensor (its first output)."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            out = self.inner(*args)
            return out[0] if isinstance(out, (tuple, list)) else next(iter(out.values()))

    return FirstOutput(model)


def _tokens(vocab: int, batch: int = 2):
    import torch
    return lambda g, seq=12: (torch.randint(0, vocab, (batch, seq), generator=g),)


def _image(channels: int, size: int, batch: int = 2):
    import torch
    return lambda g, seq=None: (torch.randn(batch, channels, size, size, generator=g),)


def _decoder(config_name: str, **extra):
    def build():
        import transformers
        config_class = getattr(transformers, config_name + "Config")
        model_class = getattr(transformers, config_name + "ForCausalLM")
        config = config_class(vocab_size=128, hidden_size=64, intermediate_size=128,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                              max_position_embeddings=128, use_cache=False, **extra)
        return _first_output(model_class(config)), _tokens(128)
    return build


def _head_dim_decoder(config_name: str, **extra):
    return _decoder(config_name, head_dim=16, **extra)


def _gpt2():
    from transformers import GPT2Config, GPT2Model
    config = GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                        use_cache=False)
    return _first_output(GPT2Model(config)), _tokens(128)


def _encoder(config_name: str, model_name: str, **extra):
    def build():
        import transformers
        config = getattr(transformers, config_name)(
            vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=64, **extra)
        return _first_output(getattr(transformers, model_name)(config)), _tokens(128)
    return build


def _distilbert():
    from transformers import DistilBertConfig, DistilBertModel
    config = DistilBertConfig(vocab_size=128, dim=64, hidden_dim=128, n_layers=2, n_heads=4,
                              max_position_embeddings=64)
    return _first_output(DistilBertModel(config)), _tokens(128)


def _t5_encoder():
    from transformers import T5Config, T5EncoderModel
    config = T5Config(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)
    return _first_output(T5EncoderModel(config)), _tokens(128)


def _whisper_encoder():
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    config = WhisperConfig(num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=4,
                           encoder_ffn_dim=128, max_source_positions=32)
    return (_first_output(WhisperEncoder(config)),
            lambda g, seq=None: (torch.randn(2, 16, 64, generator=g),))


def _vit():
    from transformers import ViTConfig, ViTModel
    config = ViTConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, image_size=32, patch_size=8)
    return _first_output(ViTModel(config, add_pooling_layer=False)), _image(3, 32)


def _vision(config_name: str, model_name: str, size: int = 32, torch_init: bool = False, **extra):
    def build():
        import transformers
        config = getattr(transformers, config_name)(**extra)
        model = getattr(transformers, model_name)(config)
        if torch_init:  # torch's default init: transformers' (normal, std 0.02) vanishes here
            for module in model.modules():
                if hasattr(module, "reset_parameters"):
                    module.reset_parameters()
        return _first_output(model), _image(3, size)
    return build


SPECS = [
    Spec("llama", _decoder("Llama"), dynamic=True),
    Spec("mistral", _decoder("Mistral")),
    Spec("qwen2", _decoder("Qwen2")),
    Spec("qwen3", _head_dim_decoder("Qwen3")),
    Spec("gemma", _head_dim_decoder("Gemma")),
    Spec("phi3", _decoder("Phi3", pad_token_id=0)),
    Spec("gpt2", _gpt2),
    Spec("bert", _encoder("BertConfig", "BertModel")),
    Spec("roberta", _encoder("RobertaConfig", "RobertaModel", pad_token_id=1)),
    Spec("distilbert", _distilbert),
    Spec("t5_encoder", _t5_encoder),
    Spec("whisper_encoder", _whisper_encoder),
    Spec("vit", _vit),
    Spec("resnet", _vision("ResNetConfig", "ResNetModel", embedding_size=16,
                           hidden_sizes=[16, 32], depths=[1, 1])),
    Spec("convnext", _vision("ConvNextConfig", "ConvNextModel", hidden_sizes=[16, 32],
                             depths=[1, 1], num_stages=2)),
    Spec("mobilenet_v2", _vision("MobileNetV2Config", "MobileNetV2Model", image_size=32,
                                 depth_multiplier=0.25, torch_init=True)),
    Spec("mixtral", _decoder("Mixtral", num_local_experts=4, num_experts_per_tok=2)),
    Spec("qwen2_moe", _decoder("Qwen2Moe", num_experts=4, num_experts_per_tok=2,
                           moe_intermediate_size=32, shared_expert_intermediate_size=64)),
]
SPECS_BY_NAME = {spec.name: spec for spec in SPECS}


def model_fallbacks(package_path: str) -> list[str]:
    """The fallback functions the package's model library imports."""
    from etmetal_py.aoti._symbols import fallback_functions

    with zipfile.ZipFile(package_path) as archive, tempfile.TemporaryDirectory() as folder:
        libraries = [n for n in archive.namelist() if n.endswith((".so", ".dylib"))]
        return fallback_functions(archive.extract(libraries[0], folder))


def _errors(got, want) -> tuple[float, float]:
    import torch
    diff = (got.double() - want.double()).abs()
    scale = want.double().abs().max().clamp_min(1e-12)
    return float(diff.max()), float(diff.max() / scale)


def run_one(spec: Spec, folder: str) -> Result:
    """Export, compile, load and run one model (in this process)."""
    import torch
    from torch.export import Dim

    from etmetal_py.aoti import aoti_compile_and_package, aoti_load_package, export

    result = Result(spec.name)
    start = time.monotonic()
    torch.manual_seed(0)
    model, make_inputs = spec.build()
    model.eval()
    example = make_inputs(torch.Generator().manual_seed(1))
    dynamic_shapes = ({"args": ({1: Dim("seq", min=2, max=64)},)} if spec.dynamic else None)
    try:
        with torch.no_grad():
            program = export(model, example, dynamic_shapes=dynamic_shapes)
            path = aoti_compile_and_package(program, package_path=os.path.join(folder, f"{spec.name}.pt2"))
        result.compiled = True
        result.fallbacks = model_fallbacks(path)
        with aoti_load_package(path) as runner:
            result.loaded = True
            draws = [make_inputs(torch.Generator().manual_seed(seed), *([seq] if spec.dynamic else []))
                     for seed, seq in ((2, 7), (3, 19))]
            worst_abs = worst_rel = 0.0
            for inputs in draws:
                with torch.no_grad():
                    want = model(*inputs)
                got = runner(*inputs)
                if got.shape != want.shape or got.dtype != want.dtype:
                    raise AssertionError(f"output {tuple(got.shape)} {got.dtype}, eager "
                                         f"{tuple(want.shape)} {want.dtype}")
                abs_error, rel_error = _errors(got, want)
                worst_abs, worst_rel = max(worst_abs, abs_error), max(worst_rel, rel_error)
            result.max_abs_error, result.max_rel_error = worst_abs, worst_rel
            result.matched = worst_rel <= spec.tol
            if not result.matched:
                result.error = f"relative error {worst_rel:.3g} above {spec.tol:g}"
    except Exception as exc:  # the sweep records every failure and goes on
        result.error = f"{type(exc).__name__}: {exc}"[:2000]
    result.seconds = round(time.monotonic() - start, 1)
    return result


def run_in_child(name: str, folder: str, timeout: float) -> Result:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", name,
                               "--folder", folder], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return Result(name, error=f"timed out after {timeout:g} s")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return Result(**json.loads(line))
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return Result(name, error=f"child exited {proc.returncode}: " + " | ".join(tail))


def format_table(results: list[Result]) -> str:
    lines = [f"{'model':<16} {'compiled':<8} {'loaded':<6} {'match':<5} {'max abs':>9} "
             f"{'max rel':>9} {'s':>6}  fallbacks / error"]
    for r in results:
        errors = (f"{r.max_abs_error:9.2e} {r.max_rel_error:9.2e}" if r.max_abs_error is not None
                  else f"{'-':>9} {'-':>9}")
        tail = ", ".join(f.replace("aoti_torch_mps_", "mps_") for f in r.fallbacks) or "-"
        if r.error:
            tail += f"  ERROR: {r.error.splitlines()[0][:300]}"
        lines.append(f"{r.name:<16} {str(r.compiled):<8} {str(r.loaded):<6} {str(r.matched):<5} "
                     f"{errors} {r.seconds:6.1f}  {tail}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(SPECS_BY_NAME), metavar="NAME")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per model")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.list:
        print("\n".join(f"{s.name}{' (dynamic sequence length)' if s.dynamic else ''}" for s in SPECS))
        return 0
    if args.one:
        print(json.dumps(asdict(run_one(SPECS_BY_NAME[args.one], args.folder))))
        return 0
    names = args.models or [s.name for s in SPECS]
    results = []
    with tempfile.TemporaryDirectory(prefix="etmetal-sweep-") as folder:
        for name in names:
            results.append(run_in_child(name, folder, args.timeout))
            print(format_table(results[-1:]).splitlines()[1], flush=True)
    print(format_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1)
    return 0 if all(r.matched for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
