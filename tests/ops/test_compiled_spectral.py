"""A compiled model that reaches the complex and FFT fallbacks through their C shims (Inductor
generates no code for complex operators: every one is a fallback call), run through libetmetal
against torch eager on CPU. Slow: one AOTI compile (about a minute on two cores). The direct
tests are in test_spectral.py."""

import pytest
import torch

from ops_testing import compile_and_load


class SpectralModel(torch.nn.Module):
    """FFT convolution (rfft, multiply, irfft: long-convolution layers), Fourier token mixing
    (FNet's fft2, real part) and Llama's original rotary embedding (polar, view_as_complex,
    complex multiply, view_as_real)."""

    def forward(self, x, kernel, q, angles):
        n = x.shape[-1]
        spectrum = torch.fft.rfft(x, n=2 * n) * torch.fft.rfft(kernel, n=2 * n)
        convolved = torch.fft.irfft(spectrum, n=2 * n)[..., :n]
        mixed = torch.fft.fft2(x.to(torch.complex64), norm="ortho").real
        rotation = torch.polar(torch.ones_like(angles), angles)
        pairs = torch.view_as_complex(q.reshape(*q.shape[:-1], -1, 2))
        rotated = torch.view_as_real(pairs * rotation).flatten(-2)
        return convolved, mixed, rotated


def inputs(seed):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 3, 20, generator=generator), torch.randn(3, 20, generator=generator),
            torch.randn(2, 5, 8, generator=generator), torch.rand(5, 4, generator=generator) * 6)


@pytest.mark.slow
def test_compiled_model_reaches_fft_and_complex_shims(tmp_path):
    model = SpectralModel()
    runner = compile_and_load(model, inputs(0), tmp_path,
                              ["aoti_torch_mps__fft_r2c", "aoti_torch_mps__fft_c2r", "aoti_torch_mps__fft_c2c",
                               "aoti_torch_mps_polar", "aoti_torch_mps_view_as_complex",
                               "aoti_torch_mps_view_as_real", "aoti_torch_mps_mul_Tensor"])
    for seed in (1, 2):
        args = inputs(seed)
        got = runner(*args)
        want = model(*args)
        assert len(got) == len(want)
        for actual, expected in zip(got, want):
            assert actual.dtype == expected.dtype and actual.shape == expected.shape
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
