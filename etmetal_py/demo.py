"""`etmetal demo`: a small decoder block compiled for Metal, run on the default device and
compared with torch eager on CPU."""

from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Callable, TextIO, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

T = TypeVar("T")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary_tables(max_positions: int, head_dim: int, base: float = 10000.0
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    inverse_frequency = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(max_positions).float(), inverse_frequency)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class DecoderBlock(nn.Module):
    """Token embedding, RMSNorm, causal self-attention with rotary positions, SiLU-gated MLP,
    and logits through the tied embedding."""

    def __init__(self, vocab: int = 256, dim: int = 64, heads: int = 4, hidden: int = 128,
                 max_positions: int = 64) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.embedding = nn.Embedding(vocab, dim)
        self.attention_norm = RMSNorm(dim)
        self.query = nn.Linear(dim, dim, bias=False)
        self.key = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(dim, dim, bias=False)
        self.attention_out = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = RMSNorm(dim)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        cos, sin = rotary_tables(max_positions, self.head_dim)
        self.register_buffer("rotary_cos", cos, persistent=False)
        self.register_buffer("rotary_sin", sin, persistent=False)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch, length = tokens.shape
        x = self.embedding(tokens)
        h = self.attention_norm(x)
        cos, sin = self.rotary_cos[:length], self.rotary_sin[:length]
        q = apply_rotary(self._heads(self.query(h)), cos, sin)
        k = apply_rotary(self._heads(self.key(h)), cos, sin)
        v = self._heads(self.value(h))
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attention_out(attention.transpose(1, 2).reshape(batch, length, -1))
        h = self.mlp_norm(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return x @ self.embedding.weight.t()


class Progress:
    """One status line per phase; on a terminal, a live elapsed-time display."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.live = stream.isatty()

    def phase(self, label: str, work: Callable[[], T]) -> tuple[T, float]:
        start = time.perf_counter()
        stop = threading.Event()
        ticker = None
        if self.live:
            def tick() -> None:
                frames = "|/-\\"
                index = 0
                while not stop.wait(0.2):
                    elapsed = time.perf_counter() - start
                    self.stream.write(f"\r  {frames[index % 4]} {label} ... {elapsed:5.1f} s")
                    self.stream.flush()
                    index += 1
            ticker = threading.Thread(target=tick, daemon=True)
            ticker.start()
        else:
            self.stream.write(f"  {label} ...\n")
            self.stream.flush()
        try:
            result = work()
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()
        elapsed = time.perf_counter() - start
        if self.live:
            self.stream.write(f"\r  done {label} in {elapsed:.1f} s{' ' * 12}\n")
        else:
            self.stream.write(f"  done in {elapsed:.1f} s\n")
        self.stream.flush()
        return result, elapsed


def run_demo(repeat: int = 20, batch: int = 2, length: int = 16, seed: int = 0,
             tolerance: float = 1e-3, out: TextIO = sys.stdout) -> int:
    """Compile, run and check the demo block; returns a process exit status."""
    import etmetal_py
    from .aoti import aoti_compile_and_package, aoti_load_package, export

    torch.manual_seed(seed)
    model = DecoderBlock().eval()
    tokens = torch.randint(0, model.embedding.num_embeddings, (batch, length))
    with torch.no_grad():
        expected = model(tokens)
    progress = Progress(sys.stderr)
    out.write(f"etmetal demo: decoder block ({sum(p.numel() for p in model.parameters())} "
              f"parameters), tokens {tuple(tokens.shape)}\n")
    with tempfile.TemporaryDirectory(prefix="etmetal-demo-") as folder:
        package = os.path.join(folder, "decoder_block.pt2")
        program, export_seconds = progress.phase("exporting for mps",
                                                 lambda: export(model, (tokens,)))
        _, compile_seconds = progress.phase(
            "compiling with AOTInductor",
            lambda: aoti_compile_and_package(program, package_path=package))
        runner, load_seconds = progress.phase("loading the package",
                                              lambda: aoti_load_package(package))
        with runner:
            actual, first_run_seconds = progress.phase(
                "first run (builds the kernels)", lambda: runner(tokens))
            latencies = []
            for _ in range(repeat):
                start = time.perf_counter()
                runner(tokens)
                latencies.append(time.perf_counter() - start)
    max_error = float((actual - expected).abs().max())
    scale = float(expected.abs().max())
    out.write(f"device:        {etmetal_py.device_name()} ({etmetal_py.device_kind()})\n")
    out.write(f"export:        {export_seconds:.2f} s\n")
    out.write(f"compile:       {compile_seconds:.2f} s\n")
    out.write(f"load:          {load_seconds:.2f} s\n")
    out.write(f"first run:     {first_run_seconds * 1e3:.1f} ms\n")
    if latencies:
        out.write(f"run latency:   median {statistics.median(latencies) * 1e3:.3f} ms, "
                  f"min {min(latencies) * 1e3:.3f} ms over {len(latencies)} runs\n")
    out.write(f"max abs error: {max_error:.3g} (outputs up to {scale:.3g}) vs torch eager CPU\n")
    if not math.isfinite(max_error) or max_error > tolerance * max(1.0, scale):
        out.write(f"FAILED: error above tolerance {tolerance:g} (relative to the output scale)\n")
        return 1
    out.write("OK\n")
    return 0
